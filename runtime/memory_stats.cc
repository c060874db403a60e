#include "runtime/memory_stats.h"

#include <cstring>
#include <fstream>
#include <string>

namespace libai {

int64_t process_status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0) return std::stoll(line.substr(n));
  return -1;
}

void reset_process_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace libai

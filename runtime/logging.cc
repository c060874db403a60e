#include "runtime/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>

namespace libai {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
int g_rank = -1;
spdlog::level::level_enum g_level = spdlog::level::info;

std::string pattern() {
  std::string rank = g_rank >= 0 ? "[rank " + std::to_string(g_rank) + "] " : "";
  return "[%H:%M:%S.%e] [%n] [%l] " + rank + "%v";
}

}  // namespace

std::shared_ptr<spdlog::logger> logger(const std::string& subsystem) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (auto existing = spdlog::get(subsystem)) return existing;
  auto created = spdlog::stderr_color_mt(subsystem);
  created->set_pattern(pattern());
  created->set_level(g_level);
  return created;
}

void set_log_rank(int rank) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  g_rank = rank;
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->set_pattern(pattern()); });
}

void set_log_level(spdlog::level::level_enum level) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  g_level = level;
  spdlog::apply_all([level](const std::shared_ptr<spdlog::logger>& l) { l->set_level(level); });
}

}  // namespace libai

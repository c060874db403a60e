#include "runtime/host_identity.h"

#include <sys/stat.h>

#include <fstream>

namespace libai {
namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// A namespace's identity is the inode of its /proc/self/ns entry.
std::string namespace_inode(const char* path) {
  struct stat st{};
  if (::stat(path, &st) != 0) return "";
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

}  // namespace

std::string host_identity() {
  const std::string boot = first_line("/proc/sys/kernel/random/boot_id");
  const std::string ipc = namespace_inode("/proc/self/ns/ipc");
  const std::string pid = namespace_inode("/proc/self/ns/pid");
  if (boot.empty() || ipc.empty() || pid.empty()) return "";
  return "boot " + boot + " ipc " + ipc + " pid " + pid;
}

}  // namespace libai

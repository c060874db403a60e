#include "runtime/device_profile.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "runtime/blas.h"
#include "runtime/config/node.h"
#include "runtime/config/suggest.h"
#include "runtime/sanitizers.h"
#include "runtime/threads.h"

namespace libai {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

// Best (smallest) seconds of `repetitions` emulated runs of `work`, after one plain warm-up.
template <class F>
double best_seconds(const EmulatedSpeed& speed, int repetitions, F&& work) {
  work();
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < repetitions; ++i) best = std::min(best, speed.run(work));
  return best;
}

double measure_matmul_gflops(const EmulatedSpeed& speed, int n, int repetitions) {
  const size_t elements = size_t(n) * size_t(n);
  std::vector<float> a(elements), b(elements), c(elements);
  for (size_t i = 0; i < elements; ++i) {
    a[i] = float(i % 7) * 0.125f;
    b[i] = float(i % 5) * 0.25f;
  }
  double seconds = best_seconds(speed, repetitions, [&] {
    gemm(Transpose::no, Transpose::no, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  return 2.0 * double(n) * double(n) * double(n) / seconds / 1e9;
}

// The last-level cache that `threads` threads can fill: one L3 instance's size (sysfs, else
// sysconf) times the instances they may spread over (a multi-die CPU has one per die).
size_t reachable_cache_bytes(int threads) {
  const std::string folder = "/sys/devices/system/cpu/cpu0/cache/index3/";
  size_t instance = 0;
  std::ifstream size_file(folder + "size");  // "32768K"
  if (size_t kib = 0; size_file >> kib) instance = kib * 1024;
  if (instance == 0) instance = size_t(std::max(0L, sysconf(_SC_LEVEL3_CACHE_SIZE)));
  if (instance == 0) instance = 32 * kMiB;
  // shared_cpu_map is a hex mask ("ffff,0000ffff") of the cpus sharing this instance.
  std::ifstream map_file(folder + "shared_cpu_map");
  int sharing = 0;
  for (char c; map_file.get(c);) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) continue;
    int digit = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10;
    sharing += __builtin_popcount(unsigned(digit));
  }
  int instances = sharing > 0 ? std::max(1, hardware_cores() / sharing) : 1;
  return instance * size_t(std::clamp(threads, 1, instances));
}

double measure_bandwidth_gbs(const EmulatedSpeed& speed, size_t bytes, int repetitions) {
  // The source is written now and the target by the warm-up copy, so that page faults stay
  // out of the timing.
  std::vector<char> source(bytes, 1);
  std::unique_ptr<char[]> target(new char[bytes]);
  double seconds = best_seconds(speed, repetitions, [&] {
    parallel_for(0, int64_t(bytes), int64_t(kMiB), [&](int64_t begin, int64_t end) {
      std::memcpy(target.get() + begin, source.data() + begin, size_t(end - begin));
    });
  });
  return 2.0 * double(bytes) / seconds / 1e9;
}

// "key value" lines (/proc/meminfo, memory.stat): the value of `key`, in the file's unit.
std::optional<uint64_t> read_keyed(const std::string& path, const std::string& key) {
  std::ifstream file(path);
  std::string name;
  uint64_t value = 0;
  while (file >> name >> value) {
    if (name == key) return value;
    file.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return std::nullopt;
}

// A file holding one number; nullopt when absent or not a number ("max": no limit).
std::optional<uint64_t> read_number(const std::string& path) {
  std::ifstream file(path);
  uint64_t value = 0;
  if (file >> value) return value;
  return std::nullopt;
}

// The folders of this process's memory cgroup and its ancestors (v2 and v1 layouts).
std::vector<std::string> memory_cgroup_folders() {
  std::vector<std::string> folders;
  std::ifstream file("/proc/self/cgroup");
  for (std::string line; std::getline(file, line);) {
    // "0::/path" (v2) or "4:memory:/path" (v1).
    size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string root;
    if (controllers.empty()) {
      root = "/sys/fs/cgroup";
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      root = "/sys/fs/cgroup/memory";
    } else {
      continue;
    }
    std::string path = line.substr(second + 1);
    for (;;) {
      folders.push_back(root + (path == "/" ? "" : path));
      if (path.empty() || path == "/") break;
      size_t slash = path.rfind('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  }
  return folders;
}

// The least headroom (limit - usage, not counting reclaimable inactive file pages) of the
// cgroups this process is in.
std::optional<uint64_t> cgroup_headroom_bytes() {
  std::optional<uint64_t> least;
  for (const std::string& folder : memory_cgroup_folders()) {
    auto limit = read_number(folder + "/memory.max");
    auto usage = read_number(folder + "/memory.current");
    auto inactive = read_keyed(folder + "/memory.stat", "inactive_file");
    if (!limit) {  // v1
      limit = read_number(folder + "/memory.limit_in_bytes");
      usage = read_number(folder + "/memory.usage_in_bytes");
      inactive = read_keyed(folder + "/memory.stat", "total_inactive_file");
    }
    if (!limit || !usage) continue;
    uint64_t used = *usage - std::min(*usage, inactive.value_or(0));
    uint64_t headroom = *limit > used ? *limit - used : 0;
    least = std::min(least.value_or(headroom), headroom);
  }
  return least;
}

}  // namespace

uint64_t host_free_memory_bytes() {
  uint64_t available = read_keyed("/proc/meminfo", "MemAvailable:").value_or(0) * 1024;
  if (auto headroom = cgroup_headroom_bytes()) available = std::min(available, *headroom);
  return available;
}

void sleep_precisely_until(std::chrono::steady_clock::time_point until) {
  // Linux lets a sleep end up to the thread's timer slack late (50 us by default): with a
  // slack of 1 ns the sleep ends within the scheduler's wake-up latency, so the spin that
  // makes up the rest can be short, which matters when several emulated devices share 2 cores
  // (their spins compete with the threads that move the packets).
  thread_local const bool slack_set = ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0) == 0;
  const auto margin = slack_set ? std::chrono::microseconds(60) : std::chrono::microseconds(200);
  if (std::chrono::steady_clock::now() + margin < until) std::this_thread::sleep_until(until - margin);
  while (std::chrono::steady_clock::now() < until) {
  }
}

DeviceProfile profile_cpu_device(Device device, int threads, double slowdown,
                                 ProfileOptions options) {
  LIBAI_CHECK(device.is_cpu(), "profile_cpu_device: expected a cpu device, got ", device);
  LIBAI_CHECK(options.repetitions >= 1, "profile_cpu_device: repetitions must be at least 1, got ",
              options.repetitions);
  LIBAI_CHECK(options.matmul_size >= 0, "profile_cpu_device: matmul_size must be >= 0, got ",
              options.matmul_size);
  EmulatedSpeed speed(slowdown);
  set_thread_budget(device, threads);
  int n = options.matmul_size > 0 ? options.matmul_size : threads > 4 ? 1024 : 512;
  // Under a sanitizer every byte copied also updates its shadow memory: a 256 MiB copy took
  // seconds under ThreadSanitizer, long enough for a cluster's join to time out while its
  // nodes profiled. Such a build's figures plan nothing that matters; its buffer is small.
  size_t bytes = options.bandwidth_bytes > 0 ? options.bandwidth_bytes
                 : kSanitizedBuild
                     ? 4 * kMiB
                     : std::clamp(2 * reachable_cache_bytes(threads), 32 * kMiB, 256 * kMiB);

  DeviceProfile profile;
  profile.name = device.str();
  profile.threads = threads;
  profile.slowdown = slowdown;
  // On a thread of its own with `device` current, so that parallel_for and OpenBLAS use this
  // device's budget and the caller's current device is left alone.
  std::exception_ptr error;
  std::thread measure([&] {
    try {
      set_current_cpu_device(device);
      profile.matmul_gflops = measure_matmul_gflops(speed, n, options.repetitions);
      profile.memory_bandwidth_gbs = measure_bandwidth_gbs(speed, bytes, options.repetitions);
    } catch (...) {
      error = std::current_exception();
    }
  });
  measure.join();
  if (error) std::rethrow_exception(error);
  profile.free_memory_bytes = host_free_memory_bytes();
  return profile;
}

void apply_profile_overrides(DeviceProfile& profile, const config::Node& fields) {
  LIBAI_CHECK(fields.is_map(), fields.describe(), ": expected a map of device profile fields, got ",
              fields.repr());
  const std::vector<std::string> known = {"matmul_gflops", "memory_bandwidth_gbs",
                                          "free_memory_bytes", "layer_seconds",
                                          "layer_step_seconds"};
  // A what-if on the rates replaces a timed layer, unless it sets the layer time too.
  if ((fields.find("matmul_gflops") || fields.find("memory_bandwidth_gbs")) &&
      !fields.find("layer_seconds")) {
    profile.layer_seconds = 0;
    profile.layer_step_seconds = 0;
  }
  // Timings per precision are of the measured device: any what-if on its speed drops them.
  if (fields.find("matmul_gflops") || fields.find("memory_bandwidth_gbs") ||
      fields.find("layer_seconds") || fields.find("layer_step_seconds"))
    profile.timings.clear();
  for (const auto& [key, value] : fields.entries()) {
    LIBAI_CHECK(std::find(known.begin(), known.end(), key) != known.end(), fields.describe(),
                ": unknown device profile field '", key, "'", config::did_you_mean(key, known),
                "; the measured fields are ", config::join_names(known));
    double number = value.as_float();
    LIBAI_CHECK(std::isfinite(number) && number > 0 && number < 9e18, value.describe(), ": ", key,
                " must be a positive number, got ", value.repr());
    if (key == "matmul_gflops") {
      profile.matmul_gflops = number;
    } else if (key == "memory_bandwidth_gbs") {
      profile.memory_bandwidth_gbs = number;
    } else if (key == "layer_seconds") {
      profile.layer_seconds = number;
    } else if (key == "layer_step_seconds") {
      profile.layer_step_seconds = number;
    } else {
      profile.free_memory_bytes = uint64_t(std::llround(number));
    }
  }
}

}  // namespace libai

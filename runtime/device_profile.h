// What a device can do, measured when a node joins: its f32 matmul rate, memory bandwidth and
// free memory. The scheduler balances pipeline stages with these numbers.
//
//   DeviceProfile p = profile_cpu_device(Device::cpu(1), /*threads=*/4);
//   // {name "cpu:1", threads 4, matmul_gflops 210, memory_bandwidth_gbs 18.5, ...}
//   if (const config::Node* what_if = cfg.root().find_path("train.cluster.profiles.cpu:1"))
//     apply_profile_overrides(p, *what_if);   // e.g. {matmul_gflops: 50}
//
// Mixed hardware on one host: a device given a slowdown s runs each unit of work through an
// EmulatedSpeed, which sleeps after the work so that the device delivers exactly 1/s of its real
// throughput while its cores are free for the other devices. The profile is measured through the
// same emulator, so an emulated device reports its emulated rates.
//
//   EmulatedSpeed speed(4.0);                       // a device 4x slower than this host
//   speed.run([&] { stage.forward(micro_batch); });  // takes ~4x as long, computes 1x
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include <thread>
#include <utility>

#include "runtime/device.h"
#include "runtime/error.h"

namespace libai {

namespace config {
class Node;
}

struct DeviceProfile {
  std::string name;                 // "cpu:0"
  int threads = 1;                  // compute threads the rates were measured with
  double matmul_gflops = 0;         // f32 sgemm rate with `threads` threads
  double memory_bandwidth_gbs = 0;  // buffer copy well above the LLC: (read + write bytes) / time
  // MemAvailable from /proc/meminfo, or the cgroup's headroom (limit - usage) when lower. The
  // host's figure: cpu devices of one host share it.
  uint64_t free_memory_bytes = 0;
  double slowdown = 1.0;  // emulation factor applied; the rates above already include it
  // Seconds of one of the job's layers on this device (one micro-batch; a model job's layer 1 at
  // its micro-batch or prefill), and of one decoding step of that layer, when the job timed one
  // there (at the device's slow-down); 0: not timed, the plan uses the roofline of the rates.
  double layer_seconds = 0;
  double layer_step_seconds = 0;
  // The same layer timed at each precision a stage may hold (train.dist.stage_precision); a
  // what-if override of the rates or of the layer times drops them.
  struct Timed {
    std::string precision;  // ops::weight_precision_name's form
    double layer_seconds = 0, layer_step_seconds = 0;
  };
  std::vector<Timed> timings;
};

// Sleeps until `until` to within a few microseconds: the OS sleep overshoots by 50-150 us on a
// VM, 5% of a 2 ms unit, so the last 200 us are spent spinning instead (not yielding: on a
// loaded host a yield can give the core away for a whole time slice, which made a 1 ms layer
// time at 1.3-1.6 ms while other nodes profiled). For emulated devices and synthetic work,
// whose cost must be what was asked.
void sleep_precisely_until(std::chrono::steady_clock::time_point until);

// Slows a device down to 1/slowdown of its throughput: after a unit of work that took t
// seconds, run() sleeps (slowdown - 1) * t (it sleeps until start + slowdown * t, with
// sleep_precisely_until), so the unit takes slowdown * t in all. Sleeping, not spinning, leaves
// the cores to other devices (all but the last 200 us). A slowdown of 1 runs the work and
// returns at once.
class EmulatedSpeed {
 public:
  explicit EmulatedSpeed(double slowdown = 1.0) : slowdown_(slowdown) {
    LIBAI_CHECK(slowdown >= 1.0 && slowdown <= 1e6, "emulated slowdown must be in [1, 1e6], got ",
                slowdown);
  }
  double slowdown() const { return slowdown_; }

  // Runs `work` and returns the seconds the unit took, sleep included.
  template <class F>
  double run(F&& work) const {
    auto start = std::chrono::steady_clock::now();
    std::forward<F>(work)();
    auto worked = std::chrono::steady_clock::now() - start;
    if (slowdown_ > 1.0) {
      auto total = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(worked) * slowdown_);
      sleep_precisely_until(start + total);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  double slowdown_;
};

struct ProfileOptions {
  int matmul_size = 0;  // n of the n x n x n sgemm; 0: 512, or 1024 for > 4 threads
  int repetitions = 3;  // timed runs after one warm-up; the best counts
  // Size of the copied buffer; 0: twice the last-level cache that `threads` threads can use
  // (source and target together 4x), clamped to [32, 256] MiB.
  size_t bandwidth_bytes = 0;
};

// Measures `device` (a cpu device) in about 0.15 s at slowdown 1 (s times that at slowdown
// s): the best of a few sgemm calls and buffer copies, each run through
// EmulatedSpeed(slowdown). The measurement runs on its own thread with `device` current, and
// the device's thread budget is set to `threads` first (and left so: the device computes with
// the budget it was measured with), so set_thread_budget's check applies: the budgets of all
// cpu devices must fit the cores.
DeviceProfile profile_cpu_device(Device device, int threads, double slowdown = 1.0,
                                 ProfileOptions options = {});

// Free memory of this host for new allocations (see DeviceProfile::free_memory_bytes).
uint64_t host_free_memory_bytes();

// What-if planning: the measured fields that `fields` (a map) gives replace the measurement.
// Keys: matmul_gflops, memory_bandwidth_gbs, free_memory_bytes. Throws InvalidArgument, naming
// the key and its location, on another key or a value that is not a positive number.
void apply_profile_overrides(DeviceProfile& profile, const config::Node& fields);

}  // namespace libai

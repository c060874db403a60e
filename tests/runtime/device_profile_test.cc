#include "runtime/device_profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "runtime/config/config.h"
#include "runtime/threads.h"

namespace libai {
namespace {

// Profiling sets the device's budget; put back what the other tests expect.
class DeviceProfileTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = thread_budget(Device::cpu(0)); }
  void TearDown() override { set_thread_budget(Device::cpu(0), saved_); }

 private:
  int saved_ = 1;
};

// Small sizes: these tests check plausibility, not the machine's peak.
ProfileOptions quick() {
  ProfileOptions options;
  options.matmul_size = 256;
  options.bandwidth_bytes = size_t(64) << 20;
  return options;
}

TEST_F(DeviceProfileTest, MeasuresPlausibleNumbers) {
  auto start = std::chrono::steady_clock::now();
  DeviceProfile profile = profile_cpu_device(Device::cpu(0), 1, 1.0, quick());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(profile.name, "cpu:0");
  EXPECT_EQ(profile.threads, 1);
  EXPECT_EQ(profile.slowdown, 1.0);
  EXPECT_EQ(thread_budget(Device::cpu(0)), 1);
  // One core of anything this runs on: between a slow emulator and a very wide vector unit.
  EXPECT_GT(profile.matmul_gflops, 0.05);
  EXPECT_LT(profile.matmul_gflops, 2000.0);
  EXPECT_GT(profile.memory_bandwidth_gbs, 0.05);
  EXPECT_LT(profile.memory_bandwidth_gbs, 2000.0);
  EXPECT_GT(profile.free_memory_bytes, 0u);
  EXPECT_LT(seconds, 20.0);  // loose: a shared machine; the real budget is well under a second
}

TEST_F(DeviceProfileTest, DefaultSizes) {
  DeviceProfile profile = profile_cpu_device(Device::cpu(0), 1);
  EXPECT_GT(profile.matmul_gflops, 0.0);
  EXPECT_GT(profile.memory_bandwidth_gbs, 0.0);
}

TEST_F(DeviceProfileTest, EmulatedSlowdownHalvesTheRates) {
  // Best of several repetitions on both sides, so that a busy neighbour rarely decides it,
  // and units of a few milliseconds, so that the sleep's wake-up latency stays small.
  // Under `ctest -j` other tests load the cores meanwhile: up to three tries, one must land.
  ProfileOptions options = quick();
  options.matmul_size = 512;
  options.repetitions = 5;
  std::string tries;
  for (int attempt = 0; attempt < 3; ++attempt) {
    DeviceProfile real = profile_cpu_device(Device::cpu(0), 1, 1.0, options);
    DeviceProfile slow = profile_cpu_device(Device::cpu(0), 1, 2.0, options);
    EXPECT_EQ(slow.slowdown, 2.0);
    const double ratio = real.matmul_gflops / slow.matmul_gflops;
    if (ratio >= 1.6 && ratio <= 2.5) return;
    tries += str_cat(" ", real.matmul_gflops, " vs ", slow.matmul_gflops, " GFLOP/s;");
  }
  ADD_FAILURE() << "the rates at slow-down 2 were not half the real ones in 3 tries:" << tries;
}

TEST_F(DeviceProfileTest, RejectsBadArguments) {
  EXPECT_THROW(profile_cpu_device(Device::cuda(0), 1), InvalidArgument);
  EXPECT_THROW(profile_cpu_device(Device::cpu(0), 1, 0.5), InvalidArgument);
  EXPECT_THROW(profile_cpu_device(Device::cpu(0), hardware_cores() + 1), InvalidArgument);
}

TEST(EmulatedSpeed, SleepsInProportionToTheWork) {
  EXPECT_THROW(EmulatedSpeed(0.9), InvalidArgument);
  EmulatedSpeed speed(3.0);
  EXPECT_EQ(speed.slowdown(), 3.0);
  int calls = 0;
  double seconds = speed.run([&] {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  EXPECT_EQ(calls, 1);
  // 20 ms of work stretched to at least 60 ms; the upper bound is loose (shared machine).
  EXPECT_GE(seconds, 0.060);
  EXPECT_LT(seconds, 1.0);
  EXPECT_LT(EmulatedSpeed(1.0).run([] {}), 0.5);
}

TEST(HostMemory, FreeMemoryIsPositiveAndBelowTheTotal) {
  uint64_t free_bytes = host_free_memory_bytes();
  EXPECT_GT(free_bytes, 0u);
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t total_kib = 0;
  meminfo >> key >> total_kib;  // "MemTotal: N kB"
  ASSERT_EQ(key, "MemTotal:");
  EXPECT_LE(free_bytes, total_kib * 1024);
}

TEST(ProfileOverrides, GivenFieldsReplaceMeasurement) {
  DeviceProfile profile;
  profile.name = "cpu:1";
  profile.matmul_gflops = 100;
  profile.memory_bandwidth_gbs = 20;
  profile.free_memory_bytes = 1000;
  config::Config cfg = config::Config::parse(
      "train:\n"
      "  cluster:\n"
      "    profiles:\n"
      "      cpu:1: {matmul_gflops: 25, free_memory_bytes: 8.0e9}\n",
      "what_if.yaml");
  apply_profile_overrides(profile, cfg.node("train.cluster.profiles.cpu:1"));
  EXPECT_EQ(profile.matmul_gflops, 25.0);
  EXPECT_EQ(profile.memory_bandwidth_gbs, 20.0);  // not given: measured value kept
  EXPECT_EQ(profile.free_memory_bytes, 8000000000u);
}

// A timed layer is the device's cost for the job; a what-if on the rates alone replaces it by
// the roofline of those rates, and layer_seconds itself can be set.
TEST(ProfileOverrides, RatesDropATimedLayerUnlessItIsSetToo) {
  DeviceProfile profile;
  profile.matmul_gflops = 100;
  profile.memory_bandwidth_gbs = 20;
  profile.layer_seconds = 0.002;
  auto apply = [&](const std::string& yaml) {
    config::Config cfg = config::Config::parse("p: " + yaml + "\n", "what_if.yaml");
    apply_profile_overrides(profile, cfg.node("p"));
  };
  apply("{free_memory_bytes: 1.0e9}");
  EXPECT_EQ(profile.layer_seconds, 0.002);
  apply("{layer_seconds: 0.008}");
  EXPECT_EQ(profile.layer_seconds, 0.008);
  apply("{matmul_gflops: 25, layer_seconds: 0.004}");
  EXPECT_EQ(profile.layer_seconds, 0.004);
  apply("{matmul_gflops: 50}");
  EXPECT_EQ(profile.layer_seconds, 0.0);
  EXPECT_EQ(profile.matmul_gflops, 50.0);
}

TEST(ProfileOverrides, BadFieldsAreNamed) {
  DeviceProfile profile;
  auto message_of = [&](const std::string& yaml) -> std::string {
    config::Config cfg = config::Config::parse("p: " + yaml + "\n", "what_if.yaml");
    try {
      apply_profile_overrides(profile, cfg.node("p"));
    } catch (const InvalidArgument& error) {
      return error.what();
    }
    return "";
  };
  std::string message = message_of("{matmul_gflop: 5}");
  EXPECT_NE(message.find("unknown device profile field 'matmul_gflop'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("did you mean 'matmul_gflops'"), std::string::npos) << message;
  message = message_of("{memory_bandwidth_gbs: -1}");
  EXPECT_NE(message.find("what_if.yaml:1:"), std::string::npos) << message;
  EXPECT_NE(message.find("must be a positive number"), std::string::npos) << message;
  EXPECT_NE(message_of("{matmul_gflops: fast}"), "");
  EXPECT_NE(message_of("[1, 2]"), "");
  EXPECT_NE(message_of("{slowdown: 2}"), "");
}

}  // namespace
}  // namespace libai

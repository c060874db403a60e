// Devices: `cpu:N` or `cuda:N`. Several cpu:N devices may share one host; each has a
// thread budget (runtime/threads.h) so that compute threads never exceed the cores.
//
//   Device d = Device::parse("cuda:1");
//   d.is_cuda();  d.index;  d.str();   // "cuda:1"
#pragma once

#include <ostream>
#include <string>
#include <string_view>

namespace libai {

enum class DeviceType : uint8_t { cpu = 0, cuda = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu(int index = 0) { return {DeviceType::cpu, index}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  static Device parse(std::string_view text);  // throws InvalidArgument

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Device& device);

// True when this build has the CUDA backend and a GPU can be used at run time.
bool cuda_available();
int cuda_device_count();

}  // namespace libai

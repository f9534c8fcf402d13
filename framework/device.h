// Device: where a tensor's storage lives. CPU everywhere; CUDA when built with MANTISSA_CUDA.
#pragma once

#include <cstdint>
#include <string>

namespace mantissa {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int8_t index = 0;  // the GPU ordinal for kCUDA; 0 for the CPU

  constexpr bool is_cpu() const { return type == DeviceType::kCPU; }
  constexpr bool is_cuda() const { return type == DeviceType::kCUDA; }
  friend constexpr bool operator==(Device a, Device b) = default;
  std::string str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(static_cast<int>(index)); }
};

inline constexpr Device kCPU{DeviceType::kCPU, 0};
constexpr Device cuda(int index = 0) { return Device{DeviceType::kCUDA, static_cast<int8_t>(index)}; }

}  // namespace mantissa

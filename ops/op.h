// An op's descriptor: what the rest of the library needs to know about an op besides its code. Each op
// that autocast may touch declares one beside its public function, with MT_OP(name, cpu, cuda): its
// autocast category on CPU tensors, then on CUDA tensors (PyTorch keeps a list per device too, and they
// differ: amp/README.md compares them op by op):
//
//   MT_OP(softmax, kNone, kFp32);          // ops::softmax, named "softmax": CPU none, CUDA fp32
//   Tensor softmax(const Tensor& x, int64_t dim);
//
// and its entry point hands the descriptor to amp::cast_inputs (ops/autocast.h), which applies the
// category of its inputs' device. The name is written once, as the identifier, and appears in errors and
// autograd node names. amp::policy_table() is a view of these descriptors (ops/op_registry.cc), never a
// second copy.
#pragma once

#include <string_view>
#include <vector>

#include "framework/device.h"

namespace mantissa {
namespace amp {

// How autocast treats an op's floating inputs (PyTorch's autocast lists for the device are the reference):
//   kLowerPrecision: to the guard's dtype (f16/bf16)   - matmul, linear, conv2d, ...
//   kFp32:           to f32                             - losses; on CUDA also softmax, log, norms, ...
//   kPromote:        to the widest floating input dtype - CPU: cat, stack; CUDA: addcmul, index_put, ...
//   kRefused:        throws (binary_cross_entropy on CUDA)
//   kNone:           untouched (ordinary type promotion applies)
enum class CastPolicy { kLowerPrecision, kFp32, kPromote, kRefused, kNone };

// An op's category on each device type, as DeviceKernels names a kernel per device (framework/device_kernels.h).
struct DevicePolicies {
  CastPolicy cpu = CastPolicy::kNone;
  CastPolicy cuda = CastPolicy::kNone;
  constexpr CastPolicy on(DeviceType device) const { return device == DeviceType::kCUDA ? cuda : cpu; }
};

}  // namespace amp

struct OpInfo {
  std::string_view name;
  amp::DevicePolicies autocast;
};

// Every descriptor, grouped by family header (for views such as amp::policy_table() and for tests).
const std::vector<const OpInfo*>& all_ops();

// Declares the descriptor ops::<name> with the autocast categories amp::CastPolicy::<cpu> for CPU tensors
// and amp::CastPolicy::<cuda> for CUDA tensors. The trailing static_assert lets a use end in a semicolon
// like any declaration.
#define MT_OP(name, cpu_policy, cuda_policy)                                                                      \
  namespace ops {                                                                                                 \
  inline constexpr OpInfo name{                                                                                   \
      #name, {.cpu = ::mantissa::amp::CastPolicy::cpu_policy, .cuda = ::mantissa::amp::CastPolicy::cuda_policy}}; \
  }                                                                                                               \
  static_assert(true)

}  // namespace mantissa

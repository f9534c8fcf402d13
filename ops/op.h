// An op's descriptor: what the rest of the library needs to know about an op besides its code. Each op
// that autocast may touch declares one beside its public function, with MT_OP(name, policy):
//
//   MT_OP(softmax, kFp32);                 // ops::softmax, named "softmax", computed in fp32 under autocast
//   Tensor softmax(const Tensor& x, int64_t dim);
//
// and its entry point hands the descriptor to amp::cast_inputs (ops/autocast.h), which applies the policy.
// The name is written once, as the identifier, and appears in errors and autograd node names.
// amp::policy_table() is a view of these descriptors (ops/op_registry.cc), never a second copy.
#pragma once

#include <string_view>
#include <vector>

namespace mantissa {
namespace amp {

// How autocast treats an op's floating inputs (PyTorch's CUDA autocast lists are the reference):
//   kLowerPrecision: to the guard's dtype (f16/bf16)   - matmul, linear, conv2d, ...
//   kFp32:           to f32                             - softmax, log, losses, norms, ...
//   kPromote:        to the widest floating input dtype - cat, stack, ...
//   kRefused:        throws (binary_cross_entropy)
//   kNone:           untouched (ordinary type promotion applies)
enum class CastPolicy { kLowerPrecision, kFp32, kPromote, kRefused, kNone };

}  // namespace amp

struct OpInfo {
  std::string_view name;
  amp::CastPolicy autocast = amp::CastPolicy::kNone;
};

// Every descriptor, grouped by family header (for views such as amp::policy_table() and for tests).
const std::vector<const OpInfo*>& all_ops();

// Declares the descriptor ops::<name> with the autocast policy amp::CastPolicy::<policy>. The trailing
// static_assert lets a use end in a semicolon like any declaration.
#define MT_OP(name, policy)                                                 \
  namespace ops {                                                           \
  inline constexpr OpInfo name{#name, ::mantissa::amp::CastPolicy::policy}; \
  }                                                                         \
  static_assert(true)

}  // namespace mantissa

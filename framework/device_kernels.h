// Per-device kernel tables: the one way every layer (framework, ops, optim, amp) reaches a CUDA kernel. A
// caller names its CPU and CUDA kernels once, in a DeviceKernels table, and calls dispatch(): the caller
// holds no device branches and no build flags. This header is where MANTISSA_WITH_CUDA is read for that.
//
//   using SoftmaxKernel = void(const Tensor& x, const Tensor& y, int64_t dim, SoftmaxKind kind);
//   constexpr DeviceKernels<SoftmaxKernel> kSoftmax{.cpu = &cpu_softmax, .cuda = MT_CUDA_KERNEL(cuda_softmax)};
//   dispatch("softmax", kSoftmax, x.device(), x, y, dim, kind);
//
// The CUDA kernels are declared in every build (a header without CUDA headers) and defined only in CUDA
// builds (.cu files, which CMake compiles only with CUDA): MT_CUDA_KERNEL keeps a CPU build from naming
// them.
#pragma once

#include <string_view>
#include <utility>

#include "framework/device.h"

namespace mantissa {

template <typename Fn>
struct DeviceKernels {
  Fn* cpu = nullptr;
  Fn* cuda = nullptr;
};

#ifdef MANTISSA_WITH_CUDA
#define MT_CUDA_KERNEL(fn) (&(fn))
#else
#define MT_CUDA_KERNEL(fn) nullptr
#endif

// The one "no kernel" error: "<op>: no kernel for cuda:0 in this build".
[[noreturn]] void no_kernel(std::string_view op, const Device& device);

// The kernel for `device`, or the "no kernel" error. Entries call it on their own to fail before any
// other work when the device has no kernel.
template <typename Fn>
Fn* kernel_for(std::string_view op, const DeviceKernels<Fn>& kernels, const Device& device) {
  Fn* fn = device.is_cuda() ? kernels.cuda : kernels.cpu;
  if (fn == nullptr) no_kernel(op, device);
  return fn;
}

template <typename Fn, typename... Args>
decltype(auto) dispatch(std::string_view op, const DeviceKernels<Fn>& kernels, const Device& device, Args&&... args) {
  return kernel_for(op, kernels, device)(std::forward<Args>(args)...);
}

}  // namespace mantissa

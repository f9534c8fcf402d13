// Per-device kernel tables: the one way every layer (framework, ops, optim, amp) reaches a CUDA kernel. A
// caller names its CPU and CUDA kernels once, in a DeviceKernels table, and calls dispatch(): the caller
// holds no device branches and no build flags. This header is where MANTISSA_WITH_CUDA is read for that.
//
//   using SoftmaxKernel = void(const Tensor& x, const Tensor& y, int64_t dim, SoftmaxKind kind);
//   constexpr DeviceKernels<SoftmaxKernel> kSoftmax{.cpu = &cpu_softmax, .cuda = MT_CUDA_KERNEL(cuda_softmax)};
//   dispatch("softmax", kSoftmax, x.device(), x, y, dim, kind);
//
// The CUDA kernels are declared in every build (a header without CUDA headers) and defined only in CUDA
// builds (.cu files, or */cuda/host/*.cc, which CMake compiles only with CUDA): MT_CUDA_KERNEL keeps a CPU
// build from naming them. A table may leave a device empty (HostCopy's copy to the host has no CPU kernel;
// the CPU GradScaler updates host fields): that device gets the "no kernel" error. The top CMakeLists.txt
// says which files each build compiles.
#pragma once

#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/device.h"
#include "framework/profiler/profiler.h"

namespace mantissa {

template <typename Fn>
struct DeviceKernels {
  Fn* cpu = nullptr;
  Fn* cuda = nullptr;
};

// Whether this build compiled the CUDA code (the one place outside CMake that reads MANTISSA_WITH_CUDA).
#ifdef MANTISSA_WITH_CUDA
inline constexpr bool kCudaCompiledIn = true;
#define MT_CUDA_KERNEL(fn) (&(fn))
#else
inline constexpr bool kCudaCompiledIn = false;
#define MT_CUDA_KERNEL(fn) nullptr
#endif

// The one "no kernel" error: "<op>: no kernel for cuda:0 in this build", with a hint to build with CUDA
// when this build has none.
[[noreturn]] void no_kernel(std::string_view op, const Device& device);

// The kernel for `device`, or the "no kernel" error. Entries call it on their own to fail before any
// other work when the device has no kernel.
template <typename Fn>
Fn* kernel_for(std::string_view op, const DeviceKernels<Fn>& kernels, const Device& device) {
  Fn* fn = device.is_cuda() ? kernels.cuda : kernels.cpu;
  if (fn == nullptr) no_kernel(op, device);
  return fn;
}

namespace detail {
// What the profiler notes of a kernel's arguments: the shape, dtype and bytes of each tensor.
template <typename A>
void note_argument(profiler::RecordScope& scope, const A& arg) {
  using T = std::remove_cvref_t<A>;
  if constexpr (std::is_same_v<T, Tensor>) {
    scope.add_input(arg);
  } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
    scope.add_inputs(arg);
  }
}
}  // namespace detail

// Runs `op`'s kernel for `device`. While the profiler records, the call is an event named `op` with its
// tensor arguments' shapes, dtypes and bytes (framework/profiler/profiler.h); otherwise that costs a load.
template <typename Fn, typename... Args>
decltype(auto) dispatch(std::string_view op, const DeviceKernels<Fn>& kernels, const Device& device, Args&&... args) {
  Fn* fn = kernel_for(op, kernels, device);
  if (!profiler::is_enabled()) [[likely]] {
    return fn(std::forward<Args>(args)...);
  }
  profiler::RecordScope scope(op, profiler::Category::kOp, device);
  (detail::note_argument(scope, args), ...);
  return fn(std::forward<Args>(args)...);
}

}  // namespace mantissa

// The elementwise typed entries for both devices: typed_entries_cpu.h's, with a CUDA op code beside the CPU functor:
// CPU tensors run the functor through ops/cpu/loops.h as before, CUDA tensors the op code through
// ops/elementwise/elementwise.cu (a launcher cannot take a host lambda). The op-code kernels sit in
// framework/device_kernels.h tables with no CPU entry (the CPU kernel is the functor), so a build without CUDA gives
// the usual "no kernel for cuda:0" error.
#pragma once

#include <string_view>
#include <utility>

#include "framework/device_kernels.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/elementwise/typed_entries_cpu.h"
#include "ops/pointwise_math.h"

namespace mantissa {

inline constexpr DeviceKernels<decltype(cuda_map_unary)> kMapUnaryCode{.cuda = MT_CUDA_KERNEL(cuda_map_unary)};
inline constexpr DeviceKernels<decltype(cuda_map_binary)> kMapBinaryCode{.cuda = MT_CUDA_KERNEL(cuda_map_binary)};
inline constexpr DeviceKernels<decltype(cuda_map_ternary)> kMapTernaryCode{.cuda = MT_CUDA_KERNEL(cuda_map_ternary)};
inline constexpr DeviceKernels<decltype(cuda_map_compare)> kMapCompareCode{.cuda = MT_CUDA_KERNEL(cuda_map_compare)};

namespace detail {
// The operand whose device picks the kernel: the first CUDA one (its kernel checks that all agree).
inline const Tensor* first_cuda(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->device().is_cuda()) return t;
  }
  return nullptr;
}
}  // namespace detail

template <typename F>
Tensor map_unary(const Tensor& x, std::string_view op, F&& f, gpu::PointwiseOp<gpu::UnaryOp> code) {
  if (x.device().is_cuda()) return dispatch(op, kMapUnaryCode, x.device(), x, op, code);
  return map_unary(x, op, std::forward<F>(f));
}

template <typename F>
Tensor map_binary(const Tensor& a, const Tensor& b, std::string_view op, F&& f, gpu::PointwiseOp<gpu::BinaryOp> code) {
  if (const Tensor* t = detail::first_cuda({&a, &b})) return dispatch(op, kMapBinaryCode, t->device(), a, b, op, code);
  return map_binary(a, b, op, std::forward<F>(f));
}

template <typename F>
Tensor map_ternary(const Tensor& a, const Tensor& b, const Tensor& c, std::string_view op, F&& f,
                   gpu::PointwiseOp<gpu::TernaryOp> code) {
  if (const Tensor* t = detail::first_cuda({&a, &b, &c})) {
    return dispatch(op, kMapTernaryCode, t->device(), a, b, c, op, code);
  }
  return map_ternary(a, b, c, op, std::forward<F>(f));
}

template <typename F>
Tensor map_compare(const Tensor& a, const Tensor& b, std::string_view op, F&& f, gpu::CompareOp code) {
  if (const Tensor* t = detail::first_cuda({&a, &b})) return dispatch(op, kMapCompareCode, t->device(), a, b, op, code);
  return map_compare(a, b, op, std::forward<F>(f));
}

}  // namespace mantissa

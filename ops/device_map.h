// map.h's typed entries with a CUDA op code beside the CPU functor: CPU tensors run the functor through
// ops/cpu/loops.h as before, CUDA tensors the op code through ops/cuda/elementwise.cu (a launcher cannot
// take a host lambda). The cuda_* entries are defined in ops/device_map.cc in CUDA builds only; the
// templates below call them only there, so a CPU build keeps map.h's "no kernel for cuda:0" errors.
#pragma once

#include <string_view>
#include <utility>

#include "ops/pointwise_math.h"
#include "ops/map.h"

namespace mantissa {

Tensor cuda_map_unary(const Tensor& x, std::string_view op, gpu::PointwiseOp<gpu::UnaryOp> code);
Tensor cuda_map_binary(const Tensor& a, const Tensor& b, std::string_view op, gpu::PointwiseOp<gpu::BinaryOp> code);
Tensor cuda_map_ternary(const Tensor& a, const Tensor& b, const Tensor& c, std::string_view op,
                        gpu::PointwiseOp<gpu::TernaryOp> code);
Tensor cuda_map_compare(const Tensor& a, const Tensor& b, std::string_view op, gpu::CompareOp code);
// cond ? x : y broadcasting all three, in x's and y's promoted dtype (any dtype); cond is bool.
Tensor cuda_select(const Tensor& cond, const Tensor& x, const Tensor& y, std::string_view op);

template <typename F>
Tensor map_unary(const Tensor& x, std::string_view op, F&& f, gpu::PointwiseOp<gpu::UnaryOp> code) {
#ifdef MANTISSA_WITH_CUDA
  if (x.device().is_cuda()) return cuda_map_unary(x, op, code);
#else
  (void)code;
#endif
  return map_unary(x, op, std::forward<F>(f));
}

template <typename F>
Tensor map_binary(const Tensor& a, const Tensor& b, std::string_view op, F&& f,
                  gpu::PointwiseOp<gpu::BinaryOp> code) {
#ifdef MANTISSA_WITH_CUDA
  if (a.device().is_cuda() || b.device().is_cuda()) return cuda_map_binary(a, b, op, code);
#else
  (void)code;
#endif
  return map_binary(a, b, op, std::forward<F>(f));
}

template <typename F>
Tensor map_ternary(const Tensor& a, const Tensor& b, const Tensor& c, std::string_view op, F&& f,
                   gpu::PointwiseOp<gpu::TernaryOp> code) {
#ifdef MANTISSA_WITH_CUDA
  if (a.device().is_cuda() || b.device().is_cuda() || c.device().is_cuda()) {
    return cuda_map_ternary(a, b, c, op, code);
  }
#else
  (void)code;
#endif
  return map_ternary(a, b, c, op, std::forward<F>(f));
}

template <typename F>
Tensor map_compare(const Tensor& a, const Tensor& b, std::string_view op, F&& f, gpu::CompareOp code) {
#ifdef MANTISSA_WITH_CUDA
  if (a.device().is_cuda() || b.device().is_cuda()) return cuda_map_compare(a, b, op, code);
#else
  (void)code;
#endif
  return map_compare(a, b, op, std::forward<F>(f));
}

}  // namespace mantissa

// The CUDA kernels of ops/elementwise/typed_entries.h's entries, by op code (a launcher cannot take a host lambda).
// Declared in every build for the dispatch tables; defined in elementwise.cu, which only CUDA builds
// compile.
#pragma once

#include <string_view>

#include "framework/tensor.h"
#include "ops/pointwise_math.h"

namespace mantissa {

Tensor cuda_map_unary(const Tensor& x, std::string_view op, gpu::PointwiseOp<gpu::UnaryOp> code);
Tensor cuda_map_binary(const Tensor& a, const Tensor& b, std::string_view op, gpu::PointwiseOp<gpu::BinaryOp> code);
Tensor cuda_map_ternary(const Tensor& a, const Tensor& b, const Tensor& c, std::string_view op,
                        gpu::PointwiseOp<gpu::TernaryOp> code);
Tensor cuda_map_compare(const Tensor& a, const Tensor& b, std::string_view op, gpu::CompareOp code);
// cond ? x : y broadcasting all three, in x's and y's promoted dtype (any dtype); cond is bool.
Tensor cuda_select(const Tensor& cond, const Tensor& x, const Tensor& y, std::string_view op);

}  // namespace mantissa

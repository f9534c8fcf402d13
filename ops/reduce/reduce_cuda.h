// The CUDA kernels of ops/reduce/reduce.cc's dispatch tables, over the same cpu::ReducePlan as the CPU ones.
// Declared in every build; defined in reduce.cu, which only CUDA builds
// compile.
#pragma once

#include "framework/tensor.h"
#include "ops/reduce/reduce.h"
#include "ops/reduce/reduce_cpu.h"

namespace mantissa {

// sum * scale over the plan's reduced dims, rounded once to x's dtype.
Tensor cuda_sum(const Tensor& x, const cpu::ReducePlan& p, double scale);
// The variance about `mean` (keepdim shape): the centred squares in the accumulation type, summed with
// the scale 1 / denom.
Tensor cuda_var(const Tensor& x, const Tensor& mean, const cpu::ReducePlan& p, double denom);
// Writes r.values and r.indices: the first NaN, else the first maximum along `dim`.
void cuda_max(const Tensor& x, const cpu::ReducePlan& p, int64_t dim, const MaxResult& r);
// max's backward along `dim`: g (keepdim shape) where the position equals the saved index, else 0.
Tensor cuda_max_backward(const Tensor& g, const Tensor& indices, const Shape& input_shape, int64_t dim);

}  // namespace mantissa

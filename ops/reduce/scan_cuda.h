// The CUDA cumsum of ops/reduce/logsumexp_prod_norm_cumsum.cc (ops/reduce/scan.cu, written to add in the CPU's order).
// Declared in every build; defined in scan.cu, which only CUDA builds
// compile.
#pragma once

#include <cstdint>

#include "framework/tensor.h"
#include "ops/reduce/row_reduce_cpu.h"

namespace mantissa {

// out = the running sums of contiguous x [outer, n, inner] along n, in either direction.
void cuda_scan(const Tensor& x, int64_t outer, int64_t n, int64_t inner, cpu::ScanDirection direction,
               const Tensor& out);

}  // namespace mantissa

// The CUDA cumsum of ops/reduce_extra.cc (ops/cuda/scan.cu: the CPU's order, the same bits). Declared in
// every build; defined in scan.cc, CUDA builds only.
#pragma once

#include <cstdint>

#include "framework/tensor.h"
#include "ops/cpu/reduce_rows.h"

namespace mantissa {

// out = the running sums of contiguous x [outer, n, inner] along n, in either direction.
void cuda_scan(const Tensor& x, int64_t outer, int64_t n, int64_t inner, cpu::ScanDirection direction,
               const Tensor& out);

}  // namespace mantissa

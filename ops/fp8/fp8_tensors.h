// What the CUDA entries of the FP8 ops (ops/fp8/fp8.cu, ops/fp8/blocks.cu) share on the tensors' side: the
// input dtypes a cast takes, and an FP8 operand described for ops/fp8/fp8_plan.h. Only for CUDA-only files.
#pragma once

#include <cstdint>

#include "framework/error.h"
#include "framework/half.h"
#include "framework/tensor.h"
#include "ops/fp8/fp8_plan.h"
#include "ops/matmul/gemm_plan.h"

namespace mantissa::fp8_tensors {

// f(T) with T the C++ type of a cast's input dtype: f32, f16 or bf16.
template <typename F>
decltype(auto) dispatch_input(DType d, F&& f) {
  switch (d) {
    case DType::kF32: return f.template operator()<float>();
    case DType::kF16: return f.template operator()<Half>();
    case DType::kBF16: return f.template operator()<BFloat16>();
    default: break;
  }
  MT_THROW("FP8 CUDA kernel: unexpected input dtype ", dtype_name(d));
}

inline int alignment_of(const Tensor& t) { return gpu::alignment_bytes(reinterpret_cast<uintptr_t>(t.data_ptr()), 0); }

inline gpu::Fp8Operand operand_of(const Tensor& t) {
  return {.dtype = t.dtype(),
          .rows = t.size(0),
          .cols = t.size(1),
          .stride0 = t.stride(0),
          .stride1 = t.stride(1),
          .align = alignment_of(t)};
}

}  // namespace mantissa::fp8_tensors

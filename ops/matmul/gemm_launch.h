// GEMM on CUDA through cuBLASLt: row-major, strided-batched, transposes as flags, the same arguments as
// ops/matmul/gemm_cpu.h over device pointers. f16/bf16 operands accumulate in f32 on tensor cores and round once
// into C; f32 is exact f32 (no TF32) unless set_cuda_matmul_tf32(Tf32::kOn); f64 is f64. Optional bias
// epilogue for linear. Only for CUDA-only files (.cu, host/*.cc).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "framework/half.h"
#include "ops/matmul/gemm_cpu.h"

namespace mantissa::gpu {

// C_i = alpha * op(A_i) op(B_i) + beta * C_i (+ bias) for i in [0, batch), all pointers on GPU `device`.
// beta == 0 never reads C (it may hold nan). A batch stride of 0 broadcasts (not for C).
template <typename T>
struct GemmArgs {
  cpu::BatchedGemmArgs<T> gemm;
  // Optional bias [n] added to every row of every C_i before the one rounding (cuBLASLt's bias epilogue;
  // a broadcast-then-beta fallback where the epilogue is not available). Requires gemm.gemm.beta == 0.
  const T* bias = nullptr;
};

void gemm(const GemmArgs<float>& args, int device, cudaStream_t stream);
void gemm(const GemmArgs<double>& args, int device, cudaStream_t stream);
void gemm(const GemmArgs<Half>& args, int device, cudaStream_t stream);
void gemm(const GemmArgs<BFloat16>& args, int device, cudaStream_t stream);

// How this thread's GEMM calls went, for tests and benchmarks: plans built (descriptor creation and a
// heuristic query) and reused, and calls that fell back from cuBLASLt to cublasGemmStridedBatchedEx.
struct GemmStats {
  int64_t plans_built = 0;
  int64_t plan_hits = 0;
  int64_t legacy_fallbacks = 0;
};
GemmStats gemm_stats();

}  // namespace mantissa::gpu

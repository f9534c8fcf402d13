// What every cuBLASLt GEMM of ops/cuda keeps per cached problem (gemm.cu's f32/f16/bf16 GEMMs and fp8_gemm.cu's
// scaled FP8 GEMM): the matmul descriptor, the A, B and C/D layouts, the algorithm the heuristic chose, freed
// together; and the one checked way to set a descriptor attribute. CUDA builds only (cuBLASLt headers).
#pragma once

#include <cublasLt.h>

#include "ops/cuda/library_check.h"

namespace mantissa::gpu {

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // c: the output's layout (C and D alike)
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;  // false: the heuristic offered nothing, or cuBLASLt declined the call
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {  // host-side frees only
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

template <typename V>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

}  // namespace mantissa::gpu

// What every cuBLASLt GEMM of ops/cuda keeps per cached problem (gemm.cu's f32/f16/bf16 GEMMs and fp8_gemm.cu's
// scaled FP8 GEMM): the matmul descriptor, the A, B and C/D layouts, the algorithm the heuristic chose, freed
// together; the one checked way to set a descriptor attribute; and the heuristic's preference (workspace
// limit, true operand alignments). CUDA builds only (cuBLASLt headers).
#pragma once

#include <array>
#include <cstdint>
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

// The heuristic's preference for one problem: at most `workspace_bytes` of workspace, and the operands' true
// alignments in bytes in cuBLAS's order {A, B, C, D} (the heuristic assumes 256 otherwise and may pick a
// kernel the pointers cannot take). Callers may set more attributes on get(). Freed with the object.
class LtPreference {
 public:
  LtPreference(uint64_t workspace_bytes, const std::array<uint32_t, 4>& alignment) {
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_));
    set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment[0]);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment[1]);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment[2]);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment[3]);
  }
  ~LtPreference() { cublasLtMatmulPreferenceDestroy(pref_); }
  LtPreference(const LtPreference&) = delete;
  LtPreference& operator=(const LtPreference&) = delete;

  template <typename V>
  void set(cublasLtMatmulPreferenceAttributes_t attr, const V& v) {
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref_, attr, &v, sizeof(v)));
  }
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

}  // namespace mantissa::gpu

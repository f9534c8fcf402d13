// cuBLASLt's FP8 GEMM (ops/fp8/fp8_launch.h), in the manner of ops/matmul/matmul.cu: the row-major product as cuBLAS's
// column-major transpose (out^T[N, M] = b^T a^T, so cuBLAS's A is our b and its B our a), descriptors, layouts
// and the heuristic's algorithm cached per thread by Fp8GemmKey, the 32 MiB per-stream workspace. The layout is
// "TN" (ops/fp8/fp8_plan.h): cuBLAS's A = our b^T [N, K] row-major, i.e. a column-major [K, N] used transposed;
// its B = our a [M, K] row-major, i.e. a column-major [K, M] used as is. The dequantization factors go in as
// device pointers (A_SCALE_POINTER is cuBLAS's A's: our scale_inv_b), accumulation is f32 (CUBLAS_COMPUTE_32F),
// with cuBLASLt's periodic promotion of the FP8 tensor cores' partial sums to f32 (FAST_ACCUM off: the
// accurate mode, as Transformer Engine uses for its gradient GEMMs).
#include <array>
#include <atomic>
#include <cublasLt.h>
#include <memory>
#include <unordered_map>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/cublaslt_plan.h"
#include "ops/cuda/library_check.h"
#include "ops/cuda/library_handles.h"
#include "ops/fp8/fp8_launch.h"

namespace mantissa::gpu {
namespace {

cudaDataType cuda_type(DType d) {
  switch (d) {
    case DType::kF8E4M3: return CUDA_R_8F_E4M3;
    case DType::kF8E5M2: return CUDA_R_8F_E5M2;
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: break;
  }
  MT_THROW("FP8 GEMM: no CUDA data type for ", dtype_name(d));
}

using Plan = LtPlan;

// cuBLASLt's name for a scale mode (cublasLt.h, cublasLtMatmulMatrixScale_t).
int32_t lt_scale_mode(Fp8ScaleMode mode) {
  switch (mode) {
    case Fp8ScaleMode::kTensor: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case Fp8ScaleMode::kOuterVector: return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case Fp8ScaleMode::kVec128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case Fp8ScaleMode::kBlock128x128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    case Fp8ScaleMode::kVec32Ue8m0: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    case Fp8ScaleMode::kVec16Ue4m3: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

struct ThreadCache {
  std::unordered_map<Fp8GemmKey, std::unique_ptr<Plan>, Fp8GemmKeyHash> plans;
  ScaledMmStats stats;
};
thread_local ThreadCache t_cache;
constexpr size_t kMaxPlans = 4096;  // as ops/matmul/matmul.cu: a run has a few hundred shapes

// The pointers of this call: the scales and the bias are descriptor attributes, set before every use.
void set_pointers(const Plan& plan, const Fp8GemmArgs& args) {
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(args.scale_inv_b));
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(args.scale_inv_a));
  if (args.key.bias == BiasPath::kEpilogue) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias);
}

[[noreturn]] void raise_cublas(const char* call, cublasStatus_t status, const Fp8GemmKey& key) {
  MT_THROW("cuBLAS error: ", call, " failed: ", cublasGetStatusName(status), ": ", cublasGetStatusString(status),
           ", for an ", describe(key));
}

std::unique_ptr<Plan> build_plan(const Fp8GemmArgs& args, cublasLtHandle_t handle) {
  const Fp8GemmKey& key = args.key;
  auto plan = std::make_unique<Plan>();
  MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  // cuBLAS's A is our b, its B our a (the file's header). Set only when not per tensor (the default).
  if (key.scale_b != Fp8ScaleMode::kTensor)
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, lt_scale_mode(key.scale_b));
  if (key.scale_a != Fp8ScaleMode::kTensor)
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, lt_scale_mode(key.scale_a));
  if (key.bias == BiasPath::kEpilogue) {
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(cuda_type(key.bias_dtype)));
  }
  set_pointers(*plan, args);  // the heuristic reads the pointers' alignment
  // Packed E2M1 pairs are CUDA_R_4F_E2M1, their leading dims counted in elements.
  const cudaDataType a_type = key.e2m1 ? CUDA_R_4F_E2M1 : cuda_type(key.b);
  const cudaDataType b_type = key.e2m1 ? CUDA_R_4F_E2M1 : cuda_type(key.a);
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, a_type, static_cast<uint64_t>(key.k),
                                             static_cast<uint64_t>(key.n), key.ldb));
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, b_type, static_cast<uint64_t>(key.k),
                                             static_cast<uint64_t>(key.m), key.lda));
  // C (not read: beta is 0) and D: out^T, a column-major [N, M] with leading dim N.
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, cuda_type(key.d), static_cast<uint64_t>(key.n),
                                             static_cast<uint64_t>(key.m), key.n));

  // The true alignments: cuBLAS's A is our b, its B our a; C is D.
  LtPreference preference(kGemmWorkspaceBytes,
                          {static_cast<uint32_t>(key.align_b), static_cast<uint32_t>(key.align_a),
                           static_cast<uint32_t>(key.align_d), static_cast<uint32_t>(key.align_d)});
  const cublasLtMatmulPreference_t pref = preference.get();
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &count);
  // NOT_SUPPORTED and INVALID_VALUE (a type combination this cuBLASLt does not take, such as a bias type it does
  // not accept for the output) decline: the caller retries without the bias epilogue, then decodes.
  if (status == CUBLAS_STATUS_SUCCESS) {
    plan->has_algo = count > 0 && result.state == CUBLAS_STATUS_SUCCESS && result.workspaceSize <= kGemmWorkspaceBytes;
    if (plan->has_algo) plan->algo = result.algo;
  } else if (status != CUBLAS_STATUS_NOT_SUPPORTED && status != CUBLAS_STATUS_INVALID_VALUE) {
    raise_cublas("cublasLtMatmulAlgoGetHeuristic", status, key);
  }
  return plan;
}

}  // namespace

bool fp8_gemm(const Fp8GemmArgs& args, cudaStream_t stream) {
  const Fp8GemmKey& key = args.key;
  DeviceGuard guard(key.device);
  cublasLtHandle_t handle = cublaslt_handle(key.device);
  auto it = t_cache.plans.find(key);
  if (it == t_cache.plans.end()) {
    if (t_cache.plans.size() >= kMaxPlans) t_cache.plans.clear();
    it = t_cache.plans.emplace(key, build_plan(args, handle)).first;
    ++t_cache.stats.plans_built;
  }
  Plan& plan = *it->second;
  if (!plan.has_algo) return false;
  set_pointers(plan, args);
  const float alpha = 1.0f, beta = 0.0f;
  const Workspace workspace = stream_workspace(key.device, stream, kGemmWorkspaceBytes);  // held until enqueued
  const cublasStatus_t status =
      cublasLtMatmul(handle, plan.desc, &alpha, args.bt, plan.a, args.a, plan.b, &beta, args.d, plan.c, args.d, plan.c,
                     &plan.algo, workspace.data(), kGemmWorkspaceBytes, stream);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
    plan.has_algo = false;  // declined for this key: do not ask again
    return false;
  }
  if (status != CUBLAS_STATUS_SUCCESS) raise_cublas("cublasLtMatmul", status, key);
  return true;
}

ScaledMmStats scaled_mm_stats() { return t_cache.stats; }

void count_scaled_mm(const ScaledMmStats& delta) {
  t_cache.stats.fp8_gemms += delta.fp8_gemms;
  t_cache.stats.separate_biases += delta.separate_biases;
  t_cache.stats.fallbacks += delta.fallbacks;
  t_cache.stats.plans_built += delta.plans_built;
}

int compute_capability(int device) {
  constexpr int kDevices = 64;
  MT_CHECK(device >= 0 && device < kDevices, "compute_capability: no CUDA device ", device);
  static std::array<std::atomic<int>, kDevices> known{};
  int sm = known[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (sm == 0) {
    int major = 0, minor = 0;
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    sm = 10 * major + minor;
    known[static_cast<size_t>(device)].store(sm, std::memory_order_relaxed);
  }
  return sm;
}

}  // namespace mantissa::gpu

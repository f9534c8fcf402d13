// GEMM on CUDA (ops/matmul/gemm_launch.h). The row-major product goes to cuBLASLt as its column-major transpose
// (ops/matmul/gemm_plan.h says how); descriptors, layouts and the heuristic's algorithm are cached per
// thread by GemmKey. When the heuristic offers nothing for a case (or cuBLASLt declines it as not
// supported), the call falls back to cublasGemmStridedBatchedEx with the same types; any other failure is
// raised with the call's name and the case (gemm_plan.h's LtVerdict). One small kernel writes
// C = beta * C + bias: the k == 0 product, and the bias broadcast when the epilogue is not used.
#include <algorithm>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <memory>
#include <type_traits>
#include <unordered_map>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "framework/dtype.h"
#include "ops/cuda/cublaslt_plan.h"
#include "ops/cuda/library_check.h"
#include "ops/cuda/library_handles.h"
#include "ops/matmul/gemm_launch.h"
#include "ops/matmul/gemm_plan.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/matmul/tf32.h"

namespace mantissa::gpu {
namespace {

// ---- types: mantissa's host type T -> CUDA's storage type, its cudaDataType and the compute types ----

template <typename T>
struct CudaType;
template <>
struct CudaType<float> {
  using Storage = float;
  using Scale = float;
  static constexpr cudaDataType kData = CUDA_R_32F;
};
template <>
struct CudaType<double> {
  using Storage = double;
  using Scale = double;
  static constexpr cudaDataType kData = CUDA_R_64F;
};
template <>
struct CudaType<Half> {
  using Storage = __half;
  using Scale = float;
  static constexpr cudaDataType kData = CUDA_R_16F;
};
template <>
struct CudaType<BFloat16> {
  using Storage = __nv_bfloat16;
  using Scale = float;
  static constexpr cudaDataType kData = CUDA_R_16BF;
};

// f16/bf16 and f32 accumulate in f32 (f32 may round its operands to TF32 when asked); f64 in f64.
template <typename T>
cublasComputeType_t compute_type(GemmMath math) {
  if constexpr (std::is_same_v<T, double>) return CUBLAS_COMPUTE_64F;
  if constexpr (std::is_same_v<T, float>) {
    if (math == GemmMath::kTf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  return CUBLAS_COMPUTE_32F;
}

template <typename T>
constexpr cudaDataType scale_type() {
  return std::is_same_v<T, double> ? CUDA_R_64F : CUDA_R_32F;
}

cublasOperation_t op(cpu::Trans t) { return t == cpu::Trans::kYes ? CUBLAS_OP_T : CUBLAS_OP_N; }

static_assert(static_cast<int>(CublasStatus::kSuccess) == CUBLAS_STATUS_SUCCESS &&
                  static_cast<int>(CublasStatus::kInvalidValue) == CUBLAS_STATUS_INVALID_VALUE &&
                  static_cast<int>(CublasStatus::kNotSupported) == CUBLAS_STATUS_NOT_SUPPORTED,
              "gemm_plan.h's mirror of cublasStatus_t");

// A failed cuBLAS(Lt) call on the case `key`: the call, cuBLAS's status and the case in words.
[[noreturn]] void raise_cublas(const char* call, cublasStatus_t status, const GemmKey& key) {
  MT_THROW("cuBLAS error: ", call, " failed: ", cublasGetStatusName(status), ": ", cublasGetStatusString(status),
           ", for a ", describe(key));
}

// ---- the C = beta * C + bias kernel ----

__device__ inline float to_compute(float x) { return x; }
__device__ inline double to_compute(double x) { return x; }
__device__ inline float to_compute(__half x) { return __half2float(x); }
__device__ inline float to_compute(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename S>
__device__ inline S from_compute(float x);
template <>
__device__ inline float from_compute<float>(float x) {
  return x;
}
template <>
__device__ inline __half from_compute<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ inline __nv_bfloat16 from_compute<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <typename S>
__device__ inline S from_compute(double x) {
  return x;
}

// Row-major C_i [rows, cols] (row stride ldc, batch stride stride_c): c = beta * c + bias[col], in the
// compute type, rounded once. beta == 0 does not read c. Grid-stride over batch * rows * cols.
template <typename S, typename Scale>
__global__ void scale_add_bias_kernel(S* c, int64_t ldc, int64_t stride_c, int64_t batch, int64_t rows, int64_t cols,
                                      Scale beta, const S* bias) {
  const int64_t total = batch * rows * cols;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t col = i % cols, row = (i / cols) % rows, b = i / (cols * rows);
    S* p = c + b * stride_c + row * ldc + col;
    Scale v = beta == Scale(0) ? Scale(0) : beta * static_cast<Scale>(to_compute(*p));
    if (bias != nullptr) v += static_cast<Scale>(to_compute(bias[col]));
    *p = from_compute<S>(v);
  }
}

template <typename T>
void launch_scale_add_bias(const cpu::BatchedGemmArgs<T>& args, typename CudaType<T>::Scale beta, const T* bias,
                           cudaStream_t stream) {
  using S = typename CudaType<T>::Storage;
  const cpu::GemmArgs<T>& g = args.gemm;
  constexpr int kBlock = 256;
  const int64_t total = args.batch * g.m * g.n;
  const int64_t blocks = std::clamp<int64_t>((total + kBlock - 1) / kBlock, 1, 65535);
  scale_add_bias_kernel<S><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
      reinterpret_cast<S*>(g.c), g.ldc, args.stride_c, args.batch, g.m, g.n, beta, reinterpret_cast<const S*>(bias));
  MT_CUDA_LAUNCH_CHECK("scale_add_bias_kernel");
}

// ---- cuBLASLt plans, cached per thread ----

using Plan = LtPlan;

struct ThreadCache {
  std::unordered_map<GemmKey, std::unique_ptr<Plan>, GemmKeyHash> plans;
  GemmStats stats;
};
thread_local ThreadCache t_cache;
constexpr size_t kMaxPlans = 4096;  // a run has a few hundred shapes; beyond this the cache starts over

cublasLtMatrixLayout_t make_layout(cudaDataType type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    MT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    MT_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return l;
}

template <typename T>
std::unique_ptr<Plan> build_plan(const GemmKey& key, cublasLtHandle_t handle) {
  constexpr cudaDataType dt = CudaType<T>::kData;
  const ColMajorGemm& g = key.gemm;
  auto plan = std::make_unique<Plan>();
  MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute_type<T>(key.math), scale_type<T>()));
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op(g.a.trans));
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op(g.b.trans));
  if (key.epilogue == GemmEpilogue::kBias) {
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, dt);  // bias [n] in the output type
  }
  plan->a = make_layout(dt, g.a.rows, g.a.cols, g.a.ld, g.batch, g.a.batch_stride);
  plan->b = make_layout(dt, g.b.rows, g.b.cols, g.b.ld, g.batch, g.b.batch_stride);
  plan->c = make_layout(dt, g.m, g.n, g.ldc, g.batch, g.stride_c);

  LtPreference preference(kGemmWorkspaceBytes,
                          {static_cast<uint32_t>(key.align_a), static_cast<uint32_t>(key.align_b),
                           static_cast<uint32_t>(key.align_c), static_cast<uint32_t>(key.align_c)});
  const cublasLtMatmulPreference_t pref = preference.get();
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    // Split-K partial sums must be reduced in f32, not in the 16-bit output type: the contract is f32
    // accumulation and a single rounding.
    const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    preference.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, mask);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &count);
  switch (lt_heuristic_verdict(status, count, result.state, result.workspaceSize, kGemmWorkspaceBytes)) {
    case LtVerdict::kUse:
      plan->algo = result.algo;
      plan->has_algo = true;
      break;
    case LtVerdict::kDecline: break;  // no algorithm for this case: the plain cuBLAS path takes it
    case LtVerdict::kRaise: raise_cublas("cublasLtMatmulAlgoGetHeuristic", status, key);
  }
  return plan;
}

// Runs the product through cuBLASLt; false when cuBLASLt has no algorithm for it.
template <typename T>
bool try_cublaslt(const GemmKey& key, const cpu::BatchedGemmArgs<T>& args, const T* bias,
                  typename CudaType<T>::Scale beta, int device, cudaStream_t stream) {
  cublasLtHandle_t handle = cublaslt_handle(device);
  auto it = t_cache.plans.find(key);
  if (it == t_cache.plans.end()) {
    if (t_cache.plans.size() >= kMaxPlans) t_cache.plans.clear();
    it = t_cache.plans.emplace(key, build_plan<T>(key, handle)).first;
    ++t_cache.stats.plans_built;
  } else {
    ++t_cache.stats.plan_hits;
  }
  Plan& plan = *it->second;
  if (!plan.has_algo) return false;
  if (key.epilogue == GemmEpilogue::kBias) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const typename CudaType<T>::Scale alpha = static_cast<typename CudaType<T>::Scale>(args.gemm.alpha);
  const Workspace workspace = stream_workspace(device, stream, kGemmWorkspaceBytes);  // held until enqueued
  // cuBLAS's A is our B and its B our A (the column-major transpose, gemm_plan.h).
  const cublasStatus_t status =
      cublasLtMatmul(handle, plan.desc, &alpha, args.gemm.b, plan.a, args.gemm.a, plan.b, &beta, args.gemm.c, plan.c,
                     args.gemm.c, plan.c, &plan.algo, workspace.data(), kGemmWorkspaceBytes, stream);
  switch (lt_matmul_verdict(status)) {
    case LtVerdict::kUse: return true;
    case LtVerdict::kDecline:
      plan.has_algo = false;  // declined for this key: do not ask again
      return false;
    case LtVerdict::kRaise: raise_cublas("cublasLtMatmul", status, key);
  }
  return false;  // not reached
}

// cublasGemmStridedBatchedEx: the same product through cuBLAS proper, which takes any alignment.
template <typename T>
void legacy_gemm(const GemmKey& key, const cpu::BatchedGemmArgs<T>& args, typename CudaType<T>::Scale beta, int device,
                 cudaStream_t stream) {
  constexpr cudaDataType dt = CudaType<T>::kData;
  const ColMajorGemm& g = key.gemm;
  cublasHandle_t handle = cublas_handle(device);
  MT_CUBLAS_CHECK(cublasSetStream(handle, stream));
  // Held until the GEMM below is enqueued. The handle keeps the pointer after that, but every use of this
  // thread's handle sets its workspace again first.
  const Workspace workspace = stream_workspace(device, stream, kGemmWorkspaceBytes);
  MT_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace.data(), kGemmWorkspaceBytes));
  // As the cuBLASLt path: no 16-bit split-K reductions (f32 accumulation, one rounding); TF32 only
  // through the compute type.
  MT_CUBLAS_CHECK(cublasSetMathMode(
      handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  const typename CudaType<T>::Scale alpha = static_cast<typename CudaType<T>::Scale>(args.gemm.alpha);
  const cublasStatus_t status = cublasGemmStridedBatchedEx_64(
      handle, op(g.a.trans), op(g.b.trans), g.m, g.n, g.k, &alpha, args.gemm.b, dt, g.a.ld, g.a.batch_stride,
      args.gemm.a, dt, g.b.ld, g.b.batch_stride, &beta, args.gemm.c, dt, g.ldc, g.stride_c, g.batch,
      compute_type<T>(key.math), CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) raise_cublas("cublasGemmStridedBatchedEx_64", status, key);
  ++t_cache.stats.legacy_fallbacks;
}

template <typename T>
void gemm_impl(const GemmArgs<T>& args, int device, cudaStream_t stream) {
  using Scale = typename CudaType<T>::Scale;
  const cpu::BatchedGemmArgs<T>& ba = args.gemm;
  const cpu::GemmArgs<T>& g = ba.gemm;
  MT_ASSERT(args.bias == nullptr || g.beta == 0.0, "gpu::gemm: a bias epilogue needs beta == 0, got ", g.beta);
  MT_ASSERT(ba.batch <= 1 || ba.stride_c != 0, "gpu::gemm: C cannot be broadcast over the batch");
  if (g.m == 0 || g.n == 0 || ba.batch == 0) return;
  DeviceGuard guard(device);
  Scale beta = static_cast<Scale>(g.beta);
  if (g.k == 0) {  // the empty sum: C = beta * C (+ bias)
    launch_scale_add_bias(ba, beta, args.bias, stream);
    return;
  }
  const RowMajorGemm rm{.trans_a = g.trans_a,
                        .trans_b = g.trans_b,
                        .m = g.m,
                        .n = g.n,
                        .k = g.k,
                        .lda = g.lda,
                        .ldb = g.ldb,
                        .ldc = g.ldc,
                        .batch = ba.batch,
                        .stride_a = ba.stride_a,
                        .stride_b = ba.stride_b,
                        .stride_c = ba.stride_c};
  constexpr int64_t esize = sizeof(T);
  GemmKey key{.device = device,
              .dtype = dtype_v<T>,
              .math = std::is_same_v<T, float> && cuda_matmul_tf32() == Tf32::kOn ? GemmMath::kTf32 : GemmMath::kExact,
              .epilogue = GemmEpilogue::kNone,
              .gemm = to_column_major(rm),
              .align_a = alignment_bytes(reinterpret_cast<uintptr_t>(g.b), ba.stride_b * esize),
              .align_b = alignment_bytes(reinterpret_cast<uintptr_t>(g.a), ba.stride_a * esize),
              .align_c = alignment_bytes(reinterpret_cast<uintptr_t>(g.c), ba.stride_c * esize)};
  if (args.bias != nullptr) {
    key.align_bias = alignment_bytes(reinterpret_cast<uintptr_t>(args.bias), 0);
    // The epilogue reads the bias with vector loads: only a 16-byte aligned bias goes through it. In bf16 it
    // rounds the product to bf16 before adding the bias (H200, cuBLAS 13.1: bench/gpu/2026-11-28-run2 and -run3,
    // tests/cuda/cublas_conformance_test.cc), and so does cuBLASLt's beta = 1 onto the broadcast bias below
    // (run 3, aligned operands): two roundings either way, as PyTorch's addmm gets from the same epilogue. f16 and
    // f32 round once. cuBLASLt offers no f32 bias for a bf16 output here (no algorithm).
    if (key.align_bias >= 16) {
      key.epilogue = GemmEpilogue::kBias;
      if (try_cublaslt(key, ba, args.bias, beta, device, stream)) return;
      key.epilogue = GemmEpilogue::kNone;
    }
    key.align_bias = 256;
    // Broadcast the bias into C, then accumulate onto it.
    launch_scale_add_bias(ba, Scale(0), args.bias, stream);
    beta = Scale(1);
  }
  if (try_cublaslt(key, ba, static_cast<const T*>(nullptr), beta, device, stream)) return;
  legacy_gemm(key, ba, beta, device, stream);
}

}  // namespace

void gemm(const GemmArgs<float>& args, int device, cudaStream_t stream) { gemm_impl(args, device, stream); }
void gemm(const GemmArgs<double>& args, int device, cudaStream_t stream) { gemm_impl(args, device, stream); }
void gemm(const GemmArgs<Half>& args, int device, cudaStream_t stream) { gemm_impl(args, device, stream); }
void gemm(const GemmArgs<BFloat16>& args, int device, cudaStream_t stream) { gemm_impl(args, device, stream); }

GemmStats gemm_stats() { return t_cache.stats; }

}  // namespace mantissa::gpu

// Typed entries (the tensors' side of the launchers above), the CUDA side of ops/matmul/matmul.cc.
namespace mantissa {

template <typename T>
void cuda_gemm(const cpu::BatchedGemmArgs<T>& args, const T* row_bias, Device device) {
  gpu::gemm(gpu::GemmArgs<T>{.gemm = args, .bias = row_bias}, device.index, gpu::current_stream(device.index));
}

template void cuda_gemm<float>(const cpu::BatchedGemmArgs<float>&, const float*, Device);
template void cuda_gemm<double>(const cpu::BatchedGemmArgs<double>&, const double*, Device);
template void cuda_gemm<Half>(const cpu::BatchedGemmArgs<Half>&, const Half*, Device);
template void cuda_gemm<BFloat16>(const cpu::BatchedGemmArgs<BFloat16>&, const BFloat16*, Device);

}  // namespace mantissa

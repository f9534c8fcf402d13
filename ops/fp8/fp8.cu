// FP8 kernels on CUDA (ops/fp8/fp8_launch.h): the fused quantize pass, amax, and the scaled matmul's epilogue.
// Quantize: each thread takes 4 consecutive elements at a time (one 32-bit store of 4 FP8 bytes), folds max |x|
// as float bits (ops/fp8/fp8_math.h: nan's bits lie above inf's, so the integer maximum propagates nan) and counts
// overflows; the block reduces both with warp shuffles and one thread adds them to the results with atomicMax
// (on the bits) and atomicAdd. A maximum and a count do not depend on the order, so the results are the CPU's
// bits (all of this is written to; none of it has run on a GPU). The scale is read on the device: delayed scaling
// is written never to wait for the host. quantize_fp8's folded form
// (Fp8CastOptions) adds one-thread kernels for the dynamic scale and the state's updates, with the CPU's
// arithmetic (ops/fp8/fp8_math.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

#include "framework/cuda/check.h"
#include "framework/cuda/copy_math.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/device_types.cuh"
#include "ops/fp8/fp8_cuda.h"
#include "ops/fp8/fp8_launch.h"
#include "ops/fp8/fp8_math.h"
#include "ops/fp8/fp8_tensors.h"
#include "ops/matmul/gemm_launch.h"
#include "ops/matmul/gemm_plan.h"

namespace mantissa::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;  // enough resident warps to keep the loads in flight; the rest is grid-stride

// Maximum over the warp, then over the block; thread 0 gets the block's value. Integer shuffles: no nan rules.
__device__ __forceinline__ uint32_t block_max(uint32_t v, uint32_t* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0u;
  for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// One element: folds |x| into m; with kWrite, returns its FP8 byte and counts an overflow.
template <typename Format, bool kWrite>
__device__ __forceinline__ uint32_t quantize_one(float v, float scale, Fp8Overflow overflow, uint32_t& m,
                                                 uint32_t& count, uint32_t& zeros) {
  if constexpr (kWrite) {
    return fp8::quantize_one<Format>(float_to_bits(v), float_to_bits(v * scale), overflow, m, count, zeros);
  } else {
    m = max(m, fp8::abs_bits(float_to_bits(v)));
    return 0u;
  }
}

// kWrite: the quantize pass (out, amax, overflow); otherwise amax alone (scale, out, overflow unused).
template <typename S, typename Format, bool kWrite>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const S* __restrict__ x, int64_t n, const float* __restrict__ scale_ptr, Fp8Overflow overflow,
                    uint32_t* __restrict__ out4, uint32_t* __restrict__ amax_bits,
                    unsigned long long* __restrict__ overflow_count, unsigned long long* __restrict__ underflow_count) {
  const float scale = kWrite ? *scale_ptr : 0.0f;
  uint32_t m = 0, count = 0, zeros = 0;
  const int64_t quads = n / 4;
  for (int64_t q = global_thread(); q < quads; q += grid_threads()) {
    uint32_t packed = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t byte = quantize_one<Format, kWrite>(widen(x[4 * q + j]), scale, overflow, m, count, zeros);
      packed |= byte << (8 * j);
    }
    if constexpr (kWrite) out4[q] = packed;
  }
  // The last n % 4 elements, one per thread of the first block.
  const int64_t i = 4 * quads + global_thread();
  if (i < n) {
    const uint32_t byte = quantize_one<Format, kWrite>(widen(x[i]), scale, overflow, m, count, zeros);
    if constexpr (kWrite) reinterpret_cast<uint8_t*>(out4)[i] = static_cast<uint8_t>(byte);
  }
  __shared__ uint32_t scratch[32];
  m = block_max(m, scratch);
  if constexpr (kWrite) {
    count = block_sum(count, scratch);  // it syncs before reusing scratch
    zeros = block_sum(zeros, scratch);
  }
  if (threadIdx.x == 0) {
    if (m != 0u) atomicMax(amax_bits, m);
    if (kWrite && count != 0u) atomicAdd(overflow_count, static_cast<unsigned long long>(count));
    if (kWrite && zeros != 0u) atomicAdd(underflow_count, static_cast<unsigned long long>(zeros));
  }
}

__global__ void dynamic_scale_kernel(const float* amax, float fp8_max, float pow2_margin, float* scale,
                                     float* scale_inv) {
  const float s = fp8::dynamic_scale(*amax, fp8_max, pow2_margin);
  *scale = s;
  *scale_inv = fp8::reciprocal(s);
}

__global__ void fold_stats_kernel(const float* amax, const int64_t* count, const int64_t* zeros, float* amax_into,
                                  double* overflow_into, double* underflow_into) {
  if (amax_into != nullptr) *amax_into = fp8::fold_amax(*amax_into, *amax);
  if (overflow_into != nullptr) *overflow_into = *overflow_into + static_cast<double>(*count);
  if (underflow_into != nullptr) *underflow_into = *underflow_into + static_cast<double>(*zeros);
}

template <typename O>
__global__ void __launch_bounds__(kThreads)
    epilogue_kernel(const float* acc, int64_t total, int64_t n, const float* __restrict__ scale_inv_a,
                    const float* __restrict__ scale_inv_b, const float* __restrict__ bias, O* out, bool rowwise) {
  // acc and out may be one buffer (an f32 output): no __restrict__ on them; each element is read, then written.
  // Rowwise: scale_inv_a [m] and scale_inv_b [n], applied column first (the CPU's RowColScales, fp8::epilogue_rowcol).
  const float tensor =
      rowwise ? 1.0f : (scale_inv_a != nullptr ? *scale_inv_a : 1.0f) * (scale_inv_b != nullptr ? *scale_inv_b : 1.0f);
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    float v;
    if (rowwise) {
      const float row = scale_inv_a[i / n], col = scale_inv_b[i % n];
      v = bias != nullptr ? fp8::epilogue_rowcol(acc[i], row, col, bias[i % n])
                          : fp8::epilogue_rowcol(acc[i], row, col);
    } else {
      v = bias != nullptr ? fp8::epilogue(acc[i], tensor, bias[i % n]) : fp8::epilogue(acc[i], tensor);
    }
    out[i] = narrow<O>(v);
  }
}

int64_t grid_for(int64_t work, int device) {
  const int64_t limit = int64_t{multiprocessor_count(device)} * kBlocksPerSm;
  return std::clamp<int64_t>(ceil_div(work, kThreads), 1, limit);
}

template <typename In, typename Format, bool kWrite>
void launch(const In* x, int64_t n, const float* scale, Fp8Overflow overflow, uint8_t* out, float* amax,
            int64_t* overflow_count, int64_t* underflow_count, int device, cudaStream_t stream) {
  MT_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if constexpr (kWrite) {
    MT_CUDA_CHECK(cudaMemsetAsync(overflow_count, 0, sizeof(int64_t), stream));
    MT_CUDA_CHECK(cudaMemsetAsync(underflow_count, 0, sizeof(int64_t), stream));
  }
  if (n == 0) return;
  MT_ASSERT(!kWrite || reinterpret_cast<uintptr_t>(out) % 4 == 0, "quantize_fp8: the output is not 4-byte aligned");
  // The tail's threads are the first n % 4 of the grid: the grid always has at least 3 threads more than that.
  const int64_t blocks = grid_for(n / 4, device);
  using S = storage_t<In>;
  quantize_kernel<S, Format, kWrite><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      reinterpret_cast<const S*>(x), n, scale, overflow, reinterpret_cast<uint32_t*>(out),
      reinterpret_cast<uint32_t*>(amax), reinterpret_cast<unsigned long long*>(overflow_count),
      reinterpret_cast<unsigned long long*>(underflow_count));
  MT_CUDA_LAUNCH_CHECK(kWrite ? "quantize_fp8 kernel" : "amax kernel");
}

}  // namespace

template <typename In>
void launch_quantize_fp8(const In* x, int64_t n, const float* scale, DType fp8, Fp8Overflow overflow, uint8_t* out,
                         float* amax, int64_t* overflow_count, int64_t* underflow_count, int device,
                         cudaStream_t stream) {
  MT_ASSERT(is_float8(fp8), "launch_quantize_fp8: ", dtype_name(fp8), " is not an FP8 dtype");
  if (fp8 == DType::kF8E4M3) {
    launch<In, Fp8E4M3Format, true>(x, n, scale, overflow, out, amax, overflow_count, underflow_count, device, stream);
  } else {
    launch<In, Fp8E5M2Format, true>(x, n, scale, overflow, out, amax, overflow_count, underflow_count, device, stream);
  }
}

template <typename In>
void launch_amax(const In* x, int64_t n, float* amax, int device, cudaStream_t stream) {
  launch<In, Fp8E4M3Format, false>(x, n, nullptr, Fp8Overflow::kSaturate, nullptr, amax, nullptr, nullptr, device,
                                   stream);
}

void launch_fp8_dynamic_scale(const float* amax, float fp8_max, float pow2_margin, float* scale, float* scale_inv,
                              cudaStream_t stream) {
  dynamic_scale_kernel<<<1, 1, 0, stream>>>(amax, fp8_max, pow2_margin, scale, scale_inv);
  MT_CUDA_LAUNCH_CHECK("fp8 dynamic scale kernel");
}

void launch_fp8_fold_stats(const float* amax, const int64_t* count, const int64_t* zeros, float* amax_into,
                           double* overflow_into, double* underflow_into, cudaStream_t stream) {
  if (amax_into == nullptr && overflow_into == nullptr && underflow_into == nullptr) return;
  fold_stats_kernel<<<1, 1, 0, stream>>>(amax, count, zeros, amax_into, overflow_into, underflow_into);
  MT_CUDA_LAUNCH_CHECK("fp8 fold stats kernel");
}

template <typename Out>
void launch_scaled_mm_epilogue(const float* acc, int64_t m, int64_t n, const float* scale_inv_a,
                               const float* scale_inv_b, const float* bias, Out* out, int device, cudaStream_t stream,
                               bool rowwise) {
  const int64_t total = m * n;
  if (total == 0) return;
  using O = storage_t<Out>;
  epilogue_kernel<O><<<static_cast<unsigned>(grid_for(total, device)), kThreads, 0, stream>>>(
      acc, total, n, scale_inv_a, scale_inv_b, bias, reinterpret_cast<O*>(out), rowwise);
  MT_CUDA_LAUNCH_CHECK("scaled_mm epilogue kernel");
}

template void launch_quantize_fp8<float>(const float*, int64_t, const float*, DType, Fp8Overflow, uint8_t*, float*,
                                         int64_t*, int64_t*, int, cudaStream_t);
template void launch_quantize_fp8<Half>(const Half*, int64_t, const float*, DType, Fp8Overflow, uint8_t*, float*,
                                        int64_t*, int64_t*, int, cudaStream_t);
template void launch_quantize_fp8<BFloat16>(const BFloat16*, int64_t, const float*, DType, Fp8Overflow, uint8_t*,
                                            float*, int64_t*, int64_t*, int, cudaStream_t);
template void launch_amax<float>(const float*, int64_t, float*, int, cudaStream_t);
template void launch_amax<Half>(const Half*, int64_t, float*, int, cudaStream_t);
template void launch_amax<BFloat16>(const BFloat16*, int64_t, float*, int, cudaStream_t);
template void launch_scaled_mm_epilogue<float>(const float*, int64_t, int64_t, const float*, const float*, const float*,
                                               float*, int, cudaStream_t, bool);
template void launch_scaled_mm_epilogue<Half>(const float*, int64_t, int64_t, const float*, const float*, const float*,
                                              Half*, int, cudaStream_t, bool);
template void launch_scaled_mm_epilogue<BFloat16>(const float*, int64_t, int64_t, const float*, const float*,
                                                  const float*, BFloat16*, int, cudaStream_t, bool);

}  // namespace mantissa::gpu

// Typed entries (the tensors' side of the launchers above), the CUDA side of ops/fp8/fp8.cc: launches on the tensors'
// device's current stream. scaled_mm follows the plan of ops/fp8/fp8_plan.h: cuBLASLt's FP8 GEMM on K-contiguous
// operands (copied first where they are not), the bias in cuBLASLt's epilogue or added by the epilogue kernel; or the
// fallback (decode to f32, the f32 GEMM of ops/matmul/gemm_launch.h, the epilogue kernel), announced once per cause on
// stderr.
namespace mantissa {
namespace {

using fp8_tensors::alignment_of;
using fp8_tensors::dispatch_input;
using fp8_tensors::operand_of;

// out = epilogue(acc, ...) rounded once to out's dtype; acc f32 [m, n] (may be out itself).
void launch_epilogue(const Tensor& acc, const float* scale_inv_a, const float* scale_inv_b, const Tensor& bias32,
                     const Tensor& out, cudaStream_t stream, bool rowwise = false) {
  const int64_t m = out.size(0), n = out.size(1);
  const float* bias = bias32.defined() ? bias32.data<float>() : nullptr;
  const int device = out.device().index;
  switch (out.dtype()) {
    case DType::kF32:
      return gpu::launch_scaled_mm_epilogue<float>(acc.data<float>(), m, n, scale_inv_a, scale_inv_b, bias,
                                                   out.data<float>(), device, stream, rowwise);
    case DType::kBF16:
      return gpu::launch_scaled_mm_epilogue<BFloat16>(acc.data<float>(), m, n, scale_inv_a, scale_inv_b, bias,
                                                      out.data<BFloat16>(), device, stream, rowwise);
    case DType::kF16:
      return gpu::launch_scaled_mm_epilogue<Half>(acc.data<float>(), m, n, scale_inv_a, scale_inv_b, bias,
                                                  out.data<Half>(), device, stream, rowwise);
    default: MT_THROW("scaled_mm: unexpected out dtype ", dtype_name(out.dtype()));
  }
}

// Once per process and cause, the fallback and why.
void announce(int device, const gpu::ScaledMmPlan& plan) {
  static std::atomic<uint32_t> announced{0};
  const uint32_t bit = uint32_t{1} << static_cast<int>(plan.fallback);
  if ((announced.fetch_or(bit) & bit) == 0) std::fprintf(stderr, "%s\n", gpu::fallback_notice(device, plan).c_str());
}

// The fallback: a and b decoded to f32 (exact; Tensor::to on the device), the f32 GEMM into an f32 accumulator
// (out itself when out is f32), the epilogue kernel with the scales read on the device.
void decode_scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_inv_a, const Tensor& scale_inv_b,
                      const Tensor& bias32, const Tensor& out, cudaStream_t stream) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const Tensor af = a.to(DType::kF32), bf = b.to(DType::kF32);  // dense row-major
  const Tensor acc = out.dtype() == DType::kF32 ? out : empty({m, n}, {.device = out.device()});
  gpu::gemm(gpu::GemmArgs<float>{.gemm = {.gemm = {.m = m,
                                                   .n = n,
                                                   .k = k,
                                                   .a = af.data<float>(),
                                                   .lda = std::max<int64_t>(k, 1),
                                                   .b = bf.data<float>(),
                                                   .ldb = std::max<int64_t>(n, 1),
                                                   .c = acc.data<float>(),
                                                   .ldc = n,
                                                   .alpha = 1.0,
                                                   .beta = 0.0},
                                          .batch = 1,
                                          .stride_c = m * n}},
            out.device().index, stream);
  const bool rowwise = scale_inv_a.dim() != 0;
  const Tensor sa = scale_inv_a.contiguous(), sb = scale_inv_b.contiguous();
  launch_epilogue(acc, sa.data<float>(), sb.data<float>(), bias32, out, stream, rowwise);
  gpu::count_scaled_mm({.fallbacks = 1});
}

// The cuBLASLt case: a_k [M, K] and bt [N, K] as handed over, d what cuBLASLt writes.
gpu::Fp8GemmKey key_of(int device, const Tensor& a_k, const Tensor& bt, const Tensor& d, const gpu::ScaledMmPlan& plan,
                       const Tensor& bias) {
  const bool epilogue = plan.bias == gpu::BiasPath::kEpilogue;
  return {.device = device,
          .a = a_k.dtype(),
          .b = bt.dtype(),
          .d = plan.d_dtype,
          .bias = epilogue ? gpu::BiasPath::kEpilogue : gpu::BiasPath::kNone,
          .bias_dtype = epilogue ? bias.dtype() : DType::kF32,
          .m = a_k.size(0),
          .n = bt.size(0),
          .k = a_k.size(1),
          .lda = plan.lda,
          .ldb = plan.ldb,
          .align_a = alignment_of(a_k),
          .align_b = alignment_of(bt),
          .align_d = alignment_of(d),
          .align_bias = epilogue ? alignment_of(bias) : 256};
}

}  // namespace

void cuda_quantize_fp8(const Tensor& x, const Tensor& scale, Fp8Overflow overflow, const Tensor& data,
                       const Tensor& amax, const Tensor& count, const Tensor& underflow) {
  gpu::DeviceGuard guard(x.device());
  dispatch_input(x.dtype(), [&]<typename T>() {
    gpu::launch_quantize_fp8<T>(x.data<T>(), x.numel(), scale.data<float>(), data.dtype(), overflow,
                                static_cast<uint8_t*>(data.data_ptr()), amax.data<float>(), count.data<int64_t>(),
                                underflow.data<int64_t>(), x.device().index, gpu::current_stream(x.device()));
  });
}

void cuda_quantize_fp8_into(const Tensor& x, const Fp8CastOptions& o, const Tensor& data, const Tensor& scale,
                            const Tensor& scale_inv) {
  gpu::DeviceGuard guard(x.device());
  const cudaStream_t stream = gpu::current_stream(x.device());
  const Tensor amax = empty({}, {.device = x.device()});
  const Tensor count = empty({}, {.dtype = DType::kI64, .device = x.device()});
  const Tensor zeros = empty({}, {.dtype = DType::kI64, .device = x.device()});
  if (!o.scale.defined()) {
    cuda_amax(x, amax);
    const float fp8_max = o.fp8 == DType::kF8E4M3 ? Float8E4M3::kMax : Float8E5M2::kMax;
    gpu::launch_fp8_dynamic_scale(amax.data<float>(), fp8_max,
                                  static_cast<float>(std::ldexp(1.0, static_cast<int>(o.margin))), scale.data<float>(),
                                  scale_inv.data<float>(), stream);
  }
  cuda_quantize_fp8(x, scale, o.overflow, data, amax, count, zeros);
  gpu::launch_fp8_fold_stats(amax.data<float>(), count.data<int64_t>(), zeros.data<int64_t>(),
                             o.amax_into.defined() ? o.amax_into.data<float>() : nullptr,
                             o.overflow_into.defined() ? o.overflow_into.data<double>() : nullptr,
                             o.underflow_into.defined() ? o.underflow_into.data<double>() : nullptr, stream);
}

void cuda_amax(const Tensor& x, const Tensor& out) {
  gpu::DeviceGuard guard(x.device());
  dispatch_input(x.dtype(), [&]<typename T>() {
    gpu::launch_amax<T>(x.data<T>(), x.numel(), out.data<float>(), x.device().index, gpu::current_stream(x.device()));
  });
}

void cuda_scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_inv_a, const Tensor& scale_inv_b,
                    const Tensor& bias_in, const Tensor& out) {
  const int device = a.device().index;
  gpu::DeviceGuard guard(device);
  const cudaStream_t stream = gpu::current_stream(device);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (m == 0 || n == 0) return;
  const Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  const Tensor bias32 = bias.defined() ? bias.to(DType::kF32) : Tensor();                    // for the epilogue kernel
  if (k == 0) return decode_scaled_mm(a, b, scale_inv_a, scale_inv_b, bias32, out, stream);  // the bias alone
  // Rowwise scales: on Hopper, cuBLASLt's OUTER_VEC_32F mode (a vector over a's rows and one over b's columns, as
  // torch._scaled_mm uses it; sm_90 only per NVIDIA's documentation), the bias added after; elsewhere, or where
  // cuBLASLt declines, the decode path with a per-element epilogue. Written, compiled, never run.
  if (scale_inv_a.dim() != 0) {
    const gpu::ScaledMmPlan plan = gpu::plan_scaled_mm(
        {.a = operand_of(a), .b = operand_of(b), .out = out.dtype(), .sm = gpu::compute_capability(device)});
    if (plan.path == gpu::ScaledMmPath::kCublasLtFp8 && gpu::compute_capability(device) == 90) {
      const Tensor a_k = plan.copy_a ? a.clone() : a;
      const Tensor bt = plan.copy_b ? b.t().clone() : b.t();
      const Tensor d = bias.defined() && out.dtype() != DType::kF32 ? empty({m, n}, {.device = out.device()}) : out;
      const Tensor sa = scale_inv_a.contiguous(), sb = scale_inv_b.contiguous();
      gpu::Fp8GemmKey key = key_of(device, a_k, bt, d, plan, Tensor());
      key.bias = gpu::BiasPath::kNone;
      key.d = d.dtype();
      key.scale_a = key.scale_b = gpu::Fp8ScaleMode::kOuterVector;
      if (gpu::fp8_gemm({.key = key,
                         .a = a_k.data_ptr(),
                         .bt = bt.data_ptr(),
                         .scale_inv_a = sa.data<float>(),
                         .scale_inv_b = sb.data<float>(),
                         .d = d.data_ptr()},
                        stream)) {
        if (bias.defined()) launch_epilogue(d, nullptr, nullptr, bias32, out, stream);
        gpu::count_scaled_mm({.fp8_gemms = 1, .separate_biases = bias.defined() ? 1 : 0});
        return;
      }
    }
    return decode_scaled_mm(a, b, scale_inv_a, scale_inv_b, bias32, out, stream);
  }

  gpu::ScaledMmPlan plan = gpu::plan_scaled_mm({.a = operand_of(a),
                                                .b = operand_of(b),
                                                .out = out.dtype(),
                                                .has_bias = bias.defined(),
                                                .bias = bias.defined() ? bias.dtype() : DType::kF32,
                                                .bias_align = bias.defined() ? alignment_of(bias) : 256,
                                                .sm = gpu::compute_capability(device)});
  if (plan.path == gpu::ScaledMmPath::kCublasLtFp8) {
    // FP8 transposes are 1 byte per element: the K-contiguous copies cost a quarter of an f32 copy.
    const Tensor a_k = plan.copy_a ? a.clone() : a;         // [M, K], row stride lda
    const Tensor bt = plan.copy_b ? b.t().clone() : b.t();  // [N, K], row stride ldb
    for (int attempt = 0; attempt < 2; ++attempt) {
      const Tensor d = plan.d_dtype == out.dtype() ? out : empty({m, n}, {.device = out.device()});
      const bool done = gpu::fp8_gemm({.key = key_of(device, a_k, bt, d, plan, bias),
                                       .a = a_k.data_ptr(),
                                       .bt = bt.data_ptr(),
                                       .scale_inv_a = scale_inv_a.data<float>(),
                                       .scale_inv_b = scale_inv_b.data<float>(),
                                       .bias = plan.bias == gpu::BiasPath::kEpilogue ? bias.data_ptr() : nullptr,
                                       .d = d.data_ptr()},
                                      stream);
      if (done) {
        const bool separate = plan.bias == gpu::BiasPath::kSeparate;
        if (separate) launch_epilogue(d, nullptr, nullptr, bias32, out, stream);  // d already holds acc * scales
        gpu::count_scaled_mm({.fp8_gemms = 1, .separate_biases = separate ? 1 : 0});
        return;
      }
      if (plan.bias != gpu::BiasPath::kEpilogue) break;
      plan = gpu::without_bias_epilogue(plan);  // no algorithm with the bias epilogue: try without it
    }
    plan.path = gpu::ScaledMmPath::kDecodeF32;
    plan.fallback = gpu::Fp8Fallback::kDeclined;
    plan.reason = detail::cat("cuBLASLt offers no FP8 algorithm for an ",
                              gpu::describe(key_of(device, a_k, bt, out, plan, bias)));
  }
  announce(device, plan);
  decode_scaled_mm(a, b, scale_inv_a, scale_inv_b, bias32, out, stream);
}

}  // namespace mantissa

// The CUDA side of ops/fp8.cc: launches on the tensors' device's current stream. scaled_mm follows the plan of
// ops/cuda/fp8_plan.h: cuBLASLt's FP8 GEMM on K-contiguous operands (copied first where they are not), the bias
// in cuBLASLt's epilogue or added by the epilogue kernel; or the fallback (decode to f32, the f32 GEMM of
// ops/matmul/gemm_launch.h, the epilogue kernel), announced once per cause on stderr.
#include "ops/cuda/host/fp8.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "framework/cuda/stream.h"
#include "ops/cuda/fp8.h"
#include "ops/matmul/gemm_launch.h"
#include "ops/matmul/gemm_plan.h"

namespace mantissa {
namespace {

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

int alignment_of(const Tensor& t) { return gpu::alignment_bytes(reinterpret_cast<uintptr_t>(t.data_ptr()), 0); }

gpu::Fp8Operand operand_of(const Tensor& t) {
  return {.dtype = t.dtype(),
          .rows = t.size(0),
          .cols = t.size(1),
          .stride0 = t.stride(0),
          .stride1 = t.stride(1),
          .align = alignment_of(t)};
}

// out = epilogue(acc, ...) rounded once to out's dtype; acc f32 [m, n] (may be out itself).
void launch_epilogue(const Tensor& acc, const float* scale_inv_a, const float* scale_inv_b, const Tensor& bias32,
                     const Tensor& out, cudaStream_t stream) {
  const int64_t m = out.size(0), n = out.size(1);
  const float* bias = bias32.defined() ? bias32.data<float>() : nullptr;
  const int device = out.device().index;
  switch (out.dtype()) {
    case DType::kF32:
      return gpu::launch_scaled_mm_epilogue<float>(acc.data<float>(), m, n, scale_inv_a, scale_inv_b, bias,
                                                   out.data<float>(), device, stream);
    case DType::kBF16:
      return gpu::launch_scaled_mm_epilogue<BFloat16>(acc.data<float>(), m, n, scale_inv_a, scale_inv_b, bias,
                                                      out.data<BFloat16>(), device, stream);
    case DType::kF16:
      return gpu::launch_scaled_mm_epilogue<Half>(acc.data<float>(), m, n, scale_inv_a, scale_inv_b, bias,
                                                  out.data<Half>(), device, stream);
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
  launch_epilogue(acc, scale_inv_a.data<float>(), scale_inv_b.data<float>(), bias32, out, stream);
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
                       const Tensor& amax, const Tensor& count) {
  gpu::DeviceGuard guard(x.device());
  dispatch_input(x.dtype(), [&]<typename T>() {
    gpu::launch_quantize_fp8<T>(x.data<T>(), x.numel(), scale.data<float>(), data.dtype(), overflow,
                                static_cast<uint8_t*>(data.data_ptr()), amax.data<float>(), count.data<int64_t>(),
                                x.device().index, gpu::current_stream(x.device()));
  });
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

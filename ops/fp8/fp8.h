// FP8 ops: per-tensor quantization to E4M3/E5M2 with a scale, and the scaled FP8 matmul (PyTorch's
// torch._scaled_mm): the two kernels FP8 training is made of. The recipes that choose the scales (amax
// history, margin, HYBRID formats), the autograd function and the routing of linear() through FP8 are in
// amp/fp8.h; this layer only computes. Every result stays on the operand's device: nothing here reads a value
// back to the host, so a step that quantizes with a delayed scale never synchronizes.
//
// CPU: exact emulation of the casts. The quantized values are the bits framework/float8.h defines (PyTorch's);
// the matmul decodes the FP8 operands exactly to bf16 (operand layouts kept) and runs ops/matmul/gemm_cpu.h's bf16
// GEMM into an f32 accumulator (AMX / AVX512_BF16: each product of two FP8 values is exact in f32, and the
// products are summed in full f32, more precisely than an FP8 tensor core sums them: Hopper's keeps 14 bits
// of the running sum, so the CPU's default FP8 accuracy is a best case; under Fp8AccumulatorScope(
// Fp8Accumulator::hopper()) the CPU sums as the H200's tensor core did, bit for bit: ops/fp8/accumulator.h),
// then applies the
// epilogue in f32: fma(acc, scale_inv_a * scale_inv_b, bias) (one f32 rounding; acc * (scale_inv_a *
// scale_inv_b) without a bias), rounded once to the output dtype (ops/fp8/fp8_math.h).
// CUDA (written, not yet run on a GPU): one fused quantize kernel (amax, cast, overflow count in one pass;
// written to give the same bits, amax and count as the CPU); the matmul is cuBLASLt's FP8 GEMM (sm_89 and
// later) with the scale inverses as device pointers (CUBLASLT_MATMUL_DESC_A_SCALE_POINTER / B_SCALE_POINTER),
// f32 accumulation, the bias in its epilogue, and K-contiguous copies of the operands it cannot read in place
// (1 byte per element). Where cuBLASLt has no FP8 kernel for a case (an older GPU, a dim that is not a
// multiple of 16) the op decodes to f32 and runs the f32 GEMM with the CPU's epilogue kernel, and says so once
// on stderr (ops/fp8/fp8_plan.h decides, and says why). The GPU's scaled_mm is written to differ from the
// CPU's only in how the exact products are summed (order, and the FP8 tensor cores' partial sums):
// tests/cuda/fp8_cuda_test.cc's bound.
#pragma once

#include "framework/float8.h"
#include "framework/tensor.h"
#include "ops/op.h"

namespace mantissa {

// The result of quantize_fp8, all on x's device.
struct Fp8Quantized {
  Tensor data;       // x's shape, contiguous, dtype kF8E4M3 or kF8E5M2: cast(x * scale), x * scale computed in
                     // f32 and rounded to nearest even (framework/float8.h's bits)
  Tensor amax;       // 0-d f32: max |x| over x (before scaling); nan if x holds a nan, 0 for an empty x
  Tensor overflow;   // 0-d i64: elements whose |x * scale| rounded above the format's max, or were inf
                     // (saturated to +-max with kSaturate; inf in E5M2, nan in E4M3 with kNoSaturate); a nan
                     // is not an overflow
  Tensor underflow;  // 0-d i64: finite elements other than 0 whose FP8 value is a zero (flushed)
};

// Quantizes x (f32, f16 or bf16, any strides) to `fp8` (kF8E4M3 or kF8E5M2) with the per-tensor `scale`
// (a 0-d f32 tensor on x's device: a device value, so delayed scaling costs no host read). The amax and the
// overflow count come from the same pass. Not differentiable (amp/fp8.h's fp8_linear owns the gradients): the
// results never carry autograd history.
MT_OP(quantize_fp8, kNone, kNone);
Fp8Quantized quantize_fp8(const Tensor& x, const Tensor& scale, DType fp8, Fp8Overflow overflow);

// One cast of an FP8 training recipe (amp/fp8_linear.h's fp8_cast) in one op: quantize_fp8 with the scaling
// state's bookkeeping folded in, which amp/fp8_scaling.h ran as ~5 small tensor ops around each cast (the amax
// history entry's max, the overflow counter's add; for dynamic scaling the scale and its reciprocal), with the
// arithmetic of those ops (ops/fp8/fp8_math.h), so the results are theirs bit for bit. On the CPU that is the
// quantize sweep and a few scalar operations; on CUDA (written, not yet run on a GPU) the fused quantize kernel
// and one-thread kernels that read and write the state on the device (no host read).
struct Fp8CastOptions {
  DType fp8 = DType::kF8E4M3;
  Fp8Overflow overflow = Fp8Overflow::kSaturate;
  // The scale (0-d f32 on x's device) to cast with: delayed scaling. Undefined: dynamic scaling, scale =
  // fp8::dynamic_scale(amax(x), fp8_max, 2^margin), from a first sweep over x (the amax is needed before any
  // value is cast).
  Tensor scale;
  int64_t margin = 0;  // dynamic only, 0 to 64
  // Updated in place where defined (on x's device): amax_into, 0-d f32 (the amax history's current entry, a
  // view), becomes fp8::fold_amax(amax_into, amax(x)); overflow_into, 0-d f64 (the run's counter), gains the
  // overflow count.
  Tensor amax_into;
  Tensor overflow_into;
  Tensor underflow_into;  // 0-d f64: gains the count of flushed elements (Fp8Quantized::underflow)
};
struct Fp8CastResult {
  Tensor data;       // as quantize_fp8's
  Tensor scale;      // the scale the cast used: options.scale, or the new dynamic one (0-d f32)
  Tensor scale_inv;  // dynamic scaling: 1 / scale, new (0-d f32); undefined when options.scale was given
};
Fp8CastResult quantize_fp8(const Tensor& x, const Fp8CastOptions& options);

// max |x| as a 0-d f32 tensor on x's device (x f32, f16 or bf16, any strides; nan propagates; 0 for an empty
// x): what dynamic scaling needs before it quantizes.
MT_OP(amax, kNone, kNone);
Tensor amax(const Tensor& x);

// out[M, N] = (a[M, K] @ b[K, N]) * scale_inv_a * scale_inv_b (+ bias[N]), a and b FP8 (any strides; E4M3 or
// E5M2 each, not both E5M2, as cuBLASLt), scale_inv_* f32 tensors (the dequantization factors, 1 / the
// quantization scale), bias 1-D f32 or out_dtype, out_dtype f32, bf16 or f16; everything on one device.
// Returns a new contiguous tensor. Not differentiable. The scales' shapes choose the scaling, as
// torch._scaled_mm reads them: both 0-d (per tensor); a [M] or [M, 1] with b [N] or [1, N] (rowwise:
// out[i, j] = acc * (a_i * b_j)); a [M, K/128] with b [K/128, ceil(N/128)] (DeepSeek-V3's 1x128 activations
// and 128x128 weights) or [K/128, N] (1x128 both), K a multiple of 128: each 128-wide block of K summed on its
// own, times its scales, the blocks summed in f32, as the H200's cuBLASLt did bit for bit (bench/gpu/
// 2026-11-28). Rowwise scales are taken on both devices (CUDA: cuBLASLt's OUTER_VEC_32F mode on Hopper, which ran
// on the H200 as the model but one f32 ulp off in places, bench/gpu/2026-11-28-run2; else the decode path); block
// scales here on the CPU only: block_scaled_mm (ops/fp8/blocks.h) takes them on both, and other block widths.
MT_OP(scaled_mm, kNone, kNone);
Tensor scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_inv_a, const Tensor& scale_inv_b,
                 DType out_dtype, const Tensor& bias = Tensor());

// Routing linear() through FP8. While a LinearOverride is installed on this thread (amp::Fp8Guard installs
// one), ops::linear asks it first, with the inputs as the caller gave them (before autocast casts anything:
// the weight is the parameter itself, so the override can recognise it and quantize its f32 master values);
// it returns an undefined Tensor to let the ordinary path run (a weight it does not manage, a shape FP8
// cannot take). While the override's linear() runs, no override is installed on this thread, so a linear()
// it calls itself (for a case it hands back, or inside its own work) takes the ordinary path instead of
// recursing; the override is back when it returns or throws.
class LinearOverride {
 public:
  virtual ~LinearOverride() = default;
  virtual Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) = 0;
};
LinearOverride* linear_override();                     // this thread's, or nullptr
LinearOverride* set_linear_override(LinearOverride*);  // returns the previous one
// ops::linear's first step: the installed override's result for (x, weight, bias), run with the override
// uninstalled as above; undefined when none is installed or it declines.
Tensor try_linear_override(const Tensor& x, const Tensor& weight, const Tensor& bias);

}  // namespace mantissa

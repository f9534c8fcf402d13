// linear_act's CPU kernels: y = act(x @ w^T + bias) with the activation applied to the GEMM's
// accumulator while it is in cache, and the backward's first step, dh = g * act'(.), with the bias
// gradient summed in the same pass. Formulas: ops/pointwise_math.h, as the activations' own ops.
//
// Forward: the output is cut into tiles sized to stay in L2 (128 rows, columns to fill 256 KiB; with too
// few tiles to keep every thread busy, one threaded GEMM, then the epilogue). Each tile is one GEMM with the
// bias pre-filled (beta 1, as linear's), then the epilogue while the accumulator is in cache. f16/bf16 round
// where linear then the activation's op round: h = x w^T + b to T (linear's output, kept for the backward),
// then act(h) to T. So the fused op computes the composed ops' values (up to the GEMM's f32 sum order) and
// PyTorch's, eager and compiled alike (Inductor's GEMM writes h in 16 bits before its pointwise kernel).
#pragma once

#include <cstdint>

#include "framework/half.h"
#include "ops/matmul/activation.h"

namespace mantissa::cpu {

template <typename T>
struct LinearActArgs {
  int64_t rows = 0, in = 0, out = 0;
  const T* x = nullptr;  // [rows, in], row stride ldx
  int64_t ldx = 0;
  const T* w = nullptr;     // [out, in], contiguous
  const T* bias = nullptr;  // [out], or null
  Activation act = Activation::kNone;
  T* y = nullptr;    // [rows, out], contiguous
  T* pre = nullptr;  // [rows, out] x w^T + bias before the activation, or null when not kept
};

template <typename T>
struct LinearActGradArgs {
  int64_t rows = 0, out = 0;
  Activation act = Activation::kNone;
  const T* g = nullptr;      // [rows, out]: the gradient of y, contiguous
  const T* saved = nullptr;  // [rows, out]: the pre-activation (GELU) or y (ReLU)
  T* dh = nullptr;           // [rows, out]: g * act'(.), rounded to T (the GEMMs' operand)
  T* dbias = nullptr;        // [out]: the column sums of dh (in the compute type, rounded once), or null
};

// T is float, double, Half or BFloat16.
template <typename T>
void linear_act_forward(const LinearActArgs<T>& args);
template <typename T>
void linear_act_backward(const LinearActGradArgs<T>& args);

}  // namespace mantissa::cpu

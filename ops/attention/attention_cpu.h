// The fused attention's CPU kernels (ops/attention/attention_cpu.cc): flash-attention tiling over raw
// pointers. Query blocks meet key blocks; each tile's scores live in a small buffer, never in a tensor;
// scores, softmax and the output's accumulation are in compute_t<T> (f32; f64 for f64), the weights and
// their gradient round to T only as GEMM operands (as on tensor cores), and each output rounds once to T. The backward
// recomputes the weights tile by tile from the saved log-sum-exp.
#pragma once

#include <cstdint>

#include "framework/dtype.h"
#include "ops/attention/attention_math.h"

namespace mantissa::cpu {

template <typename T>
struct AttentionForwardArgs {
  AttentionShape shape;
  compute_t<T> scale = 1;
  AttentionDropout dropout;
  const T* q = nullptr;
  AttentionRows q_rows;
  const T* k = nullptr;
  AttentionRows k_rows;
  const T* v = nullptr;
  AttentionRows v_rows;
  T* out = nullptr;             // [N, L, Dv], contiguous
  compute_t<T>* lse = nullptr;  // [N, L]: log(sum_j exp(s_ij)) over the visible keys, for the backward
};

template <typename T>
struct AttentionBackwardArgs {
  AttentionForwardArgs<T> forward;  // the forward's inputs, out and lse (read only)
  const T* dout = nullptr;          // [N, L, Dv], contiguous
  T* dq = nullptr;                  // [N, L, D], contiguous
  T* dk = nullptr;                  // [N, S, D], contiguous
  T* dv = nullptr;                  // [N, S, Dv], contiguous
};

template <typename T>
void attention_forward(const AttentionForwardArgs<T>& args);
template <typename T>
void attention_backward(const AttentionBackwardArgs<T>& args);

}  // namespace mantissa::cpu

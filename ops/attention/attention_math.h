// The fused attention's per-element math, once for both devices (MT_HD): where a row of q, k or v lives,
// which keys a query sees, and the dropout keep decision drawn from the Generator's own word stream, so
// that the CPU kernel, the CUDA kernel and the composed path (dropout(softmax(...)) on a contiguous
// [..., L, S] tensor) drop the same attention weights (the CUDA kernel is written to; it has never run).
#pragma once

#include <cstdint>

#include "framework/host_device.h"
#include "ops/cuda/philox.h"

namespace mantissa {

// Rows of one operand ([batch..., rows, cols], last dim contiguous) with its batch dims folded into two
// levels: flat batch index n = outer * inner_size + inner. Expanded (broadcast) dims have stride 0.
struct AttentionRows {
  int64_t inner_size = 1;
  int64_t outer_stride = 0, inner_stride = 0;
  int64_t row_stride = 0;
  MT_HD int64_t offset(int64_t n, int64_t row) const {
    return (n / inner_size) * outer_stride + (n % inner_size) * inner_stride + row * row_stride;
  }
};

// Dropout on the attention weights: element (n, i, j) of the [N, L, S] weights takes stream word
// position + (n * L + i) * S + j, the word dropout() would draw for it, and is kept when that word's
// uniform float is below keep; kept weights are multiplied by scale = 1 / (1 - p).
struct AttentionDropout {
  float keep = 1.0f;
  double scale = 1.0;
  uint64_t seed = 0;
  uint64_t position = 0;
  MT_HD bool active() const { return keep < 1.0f; }
  // The factor on weight `element` (its index in the [N, L, S] weights): scale when kept, else 0.
  MT_HD double factor(uint64_t element) const {
    const uint64_t word = position + element;
    const Philox4 block = gpu::generator_block(seed, word / 4);
    // Selected, not indexed: a run-time index into block.v would put it in a GPU thread's local memory.
    const uint32_t k = static_cast<uint32_t>(word % 4);
    const uint32_t w = k == 0 ? block.v[0] : k == 1 ? block.v[1] : k == 2 ? block.v[2] : block.v[3];
    return factor_of_word(w);
  }
  // The factor a stream word gives (for loops that draw a Philox block once per four words).
  MT_HD double factor_of_word(uint32_t w) const { return gpu::uniform_from_word(w) < keep ? scale : 0.0; }
};

// Problem sizes: N flattened batch (x heads), L queries, S keys, head dims D (q, k) and Dv (v, out).
struct AttentionShape {
  int64_t N = 0, L = 0, S = 0, D = 0, Dv = 0;
  bool causal = false;  // query i sees keys j <= i (top-left aligned, as PyTorch's is_causal)
  // How many keys query i sees (a prefix of [0, S)).
  MT_HD int64_t visible_keys(int64_t i) const {
    if (!causal) return S;
    return i + 1 < S ? i + 1 : S;
  }
};

}  // namespace mantissa

// The precision ladder's CPU storage adapters (optim/cpu/ladder_kernels.h): load a block into f32, let the
// optimizer's own step run on it, store it back rounded or re-quantized.
#include "optim/cpu/ladder_kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "framework/convert.h"
#include "framework/parallel.h"
#include "framework/philox.h"
#include "optim/low_precision.h"

namespace mantissa::cpu {
namespace {

namespace lp = low_precision;
constexpr int64_t kBlock = lp::kQuantBlock;

// Elements [b, b + n) of `buf` (block k) into out, as f32.
void load(const LadderBuffer& buf, int64_t b, int64_t n, int64_t k, float* out) {
  switch (buf.storage) {
    case Storage::kF32: std::memcpy(out, static_cast<const float*>(buf.data) + b, sizeof(float) * size_t(n)); return;
    case Storage::kBF16: convert(static_cast<const BFloat16*>(buf.data) + b, out, n); return;
    case Storage::kU8Signed:
    case Storage::kU8Unsigned: {
      const float* map = lp::dynamic_map(buf.storage == Storage::kU8Signed);
      const uint8_t* codes = static_cast<const uint8_t*>(buf.data) + b;
      const float absmax = buf.absmax[k];
      for (int64_t i = 0; i < n; ++i) out[i] = map[codes[i]] * absmax;
      return;
    }
  }
}

// A state buffer's block back from f32: rounded to nearest bf16, or quantized with the block's new absmax.
void store_state(const LadderBuffer& buf, int64_t b, int64_t n, int64_t k, const float* in) {
  switch (buf.storage) {
    case Storage::kF32: std::memcpy(static_cast<float*>(buf.data) + b, in, sizeof(float) * size_t(n)); return;
    case Storage::kBF16: {
      uint16_t* out = static_cast<uint16_t*>(buf.data) + b;
      for (int64_t i = 0; i < n; ++i) out[i] = lp::bf16_nearest(in[i]);
      return;
    }
    case Storage::kU8Signed:
    case Storage::kU8Unsigned:
      // Signed state (momentum) to the nearest code; unsigned (Adam's second moments) to the code at or above.
      lp::quantize_blockwise(in, n, kBlock, buf.storage == Storage::kU8Signed, static_cast<uint8_t*>(buf.data) + b,
                             buf.absmax + k,
                             buf.storage == Storage::kU8Signed ? lp::CodeRounding::kNearest : lp::CodeRounding::kUp);
      return;
  }
}

// The weights' block back from the optimizer's f32 result: an fp32 master takes it as it is (and refreshes its
// working copy); bf16 weights round it by the ladder's rule (Kahan's starts from the stored bf16 weight, still
// untouched, and its compensation).
void store_param(const LadderParam& t, const PrecisionLadder& ladder, uint32_t step, int64_t b, int64_t n,
                 const float* in) {
  if (t.param.storage == Storage::kF32) {
    float* out = static_cast<float*>(t.param.data) + b;
    std::memcpy(out, in, sizeof(float) * size_t(n));
    if (t.copy.data != nullptr) {
      if (t.copy.dtype == CopyDType::kF16) {
        convert(out, static_cast<Half*>(t.copy.data) + b, n);
      } else {
        convert(out, static_cast<BFloat16*>(t.copy.data) + b, n);
      }
    }
    return;
  }
  uint16_t* out = static_cast<uint16_t*>(t.param.data) + b;
  switch (ladder.update_rounding) {
    case UpdateRounding::kNearest:
      for (int64_t i = 0; i < n; ++i) out[i] = lp::bf16_nearest(in[i]);
      return;
    case UpdateRounding::kStochastic:
      // update_random's words four at a time: one Philox block serves elements 4j .. 4j + 3 of the whole parameter
      // (t.first + b is a multiple of 4).
      for (int64_t i = 0; i < n; i += 4) {
        const uint64_t block = uint64_t(t.first + b + i) >> 2;
        const Philox4 r = philox4x32_10(uint32_t(block), uint32_t(block >> 32), t.stream, step, uint32_t(ladder.seed),
                                        uint32_t(ladder.seed >> 32));
        for (int64_t k = 0; k < 4 && i + k < n; ++k) out[i + k] = lp::bf16_stochastic(in[i + k], r.v[k]);
      }
      return;
    case UpdateRounding::kKahan: {
      uint16_t* c = t.compensation + b;
      for (int64_t i = 0; i < n; ++i) lp::kahan_bf16(out[i], c[i], in[i]);
      return;
    }
  }
}

}  // namespace

void ladder_step(const LadderParam& t, const PrecisionLadder& ladder, const LadderOp& op, ScalingPointers s) {
  if (s.found_inf != nullptr && *s.found_inf != 0.0f) return;
  const int64_t before = *t.step;
  *t.step += 1;
  const auto step = static_cast<uint32_t>(*t.step);  // stochastic rounding draws with the count after this step
  const int64_t blocks = (t.n + kBlock - 1) / kBlock;
  // The grad is read through a LadderBuffer of the parameter's storage (never written).
  const LadderBuffer grad{.data = const_cast<void*>(t.grad), .storage = t.param.storage};
  parallel_for(blocks, 4, [&](int64_t k0, int64_t k1) {
    std::vector<float> scratch(size_t(kBlock) * (2 + kMaxLadderState));
    float* p = scratch.data();
    float* g = p + kBlock;
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t b = k * kBlock, n = std::min(kBlock, t.n - b);
      load(t.param, b, n, k, p);
      load(grad, b, n, k, g);
      float* st[kMaxLadderState] = {};
      for (int j = 0; j < t.num_state; ++j) {
        st[j] = g + kBlock * (j + 1);
        load(t.state[j], b, n, k, st[j]);
      }
      int64_t local = before;  // the optimizer's step advances this copy as it advanced *t.step
      switch (op.kind) {
        case LadderKind::kSgd:
          sgd_step<float>({.param = p, .grad = g, .momentum_buffer = st[0], .step = &local, .n = n}, op.sgd, s);
          break;
        case LadderKind::kAdam:
          adam_step<float>({.param = p,
                            .grad = g,
                            .exp_avg = st[0],
                            .exp_avg_sq = st[1],
                            .max_exp_avg_sq = op.adam.amsgrad ? st[2] : nullptr,
                            .step = &local,
                            .n = n},
                           op.adam, op.mode, s);
          break;
        case LadderKind::kLion:
          lion_step<float>({.param = p, .grad = g, .exp_avg = st[0], .step = &local, .n = n}, op.lion, s);
          break;
      }
      store_param(t, ladder, step, b, n, p);
      for (int j = 0; j < t.num_state; ++j) store_state(t.state[j], b, n, k, st[j]);
    }
  });
}

}  // namespace mantissa::cpu

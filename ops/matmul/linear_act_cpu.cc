// linear_act's CPU kernels (ops/matmul/linear_act_cpu.h). The f32 epilogue loops are built twice (the AVX2
// baseline and AVX-512, picked once from the CPU), as the GELU op's kernels are: elementwise with the same
// explicit fmas, so both builds give the same bits.
#include "ops/matmul/linear_act_cpu.h"

#include <algorithm>
#include <type_traits>

#include "framework/convert.h"
#include "framework/dtype.h"
#include "framework/parallel.h"
#include "ops/cpu/compute_buffer.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/vec_math.h"
#include "ops/matmul/gemm_cpu.h"
#include "ops/pointwise_math.h"

namespace mantissa::cpu {
namespace {

// y = act(x) and dh = g act'(s) over n values: the formulas of the activations' own ops.
template <typename C>
[[gnu::always_inline]] inline void act_loop(Activation act, const C* __restrict x, C* __restrict y, int64_t n) {
  switch (act) {
    case Activation::kNone: std::copy(x, x + n, y); return;
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = pointwise::relu(x[i]);
      return;
    case Activation::kGelu:
      for (int64_t i = 0; i < n; ++i) y[i] = pointwise::gelu<VecMath>(x[i]);
      return;
    case Activation::kGeluTanh:
      for (int64_t i = 0; i < n; ++i) y[i] = pointwise::gelu_tanh<VecMath>(x[i]);
      return;
  }
}

template <typename C>
[[gnu::always_inline]] inline void grad_loop(Activation act, const C* __restrict g, const C* __restrict s,
                                             C* __restrict dh, int64_t n) {
  switch (act) {
    case Activation::kNone: std::copy(g, g + n, dh); return;
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) dh[i] = pointwise::relu_backward(g[i], s[i]);
      return;
    case Activation::kGelu:
      for (int64_t i = 0; i < n; ++i) dh[i] = pointwise::gelu_backward<VecMath>(g[i], s[i]);
      return;
    case Activation::kGeluTanh:
      for (int64_t i = 0; i < n; ++i) dh[i] = pointwise::gelu_tanh_backward<VecMath>(g[i], s[i]);
      return;
  }
}

using ActBlock = void (*)(Activation, const float*, float*, int64_t);
using GradBlock = void (*)(Activation, const float*, const float*, float*, int64_t);

#define MT_ACT_BLOCKS_(SUFFIX, ATTR)                                                                        \
  ATTR void act_block_##SUFFIX(Activation act, const float* __restrict x, float* __restrict y, int64_t n) { \
    act_loop<float>(act, x, y, n);                                                                          \
  }                                                                                                         \
  ATTR void grad_block_##SUFFIX(Activation act, const float* __restrict g, const float* __restrict s,       \
                                float* __restrict dh, int64_t n) {                                          \
    grad_loop<float>(act, g, s, dh, n);                                                                     \
  }
MT_ACT_BLOCKS_(avx2, )
MT_ACT_BLOCKS_(avx512, __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))))
#undef MT_ACT_BLOCKS_

// The compute type's loops: f32 through the build the CPU runs best, f64 the plain one.
template <typename C>
void act_values(Activation act, const C* x, C* y, int64_t n) {
  if constexpr (std::is_same_v<C, float>) {
    (has_avx512_block_isa() ? act_block_avx512 : act_block_avx2)(act, x, y, n);
  } else {
    act_loop<C>(act, x, y, n);
  }
}

template <typename C>
void grad_values(Activation act, const C* g, const C* s, C* dh, int64_t n) {
  if constexpr (std::is_same_v<C, float>) {
    (has_avx512_block_isa() ? grad_block_avx512 : grad_block_avx2)(act, g, s, dh, n);
  } else {
    grad_loop<C>(act, g, s, dh, n);
  }
}

struct LinearActScratch {};
template <typename C, int kSlot>
C* scratch(int64_t count) {
  return thread_scratch<C, LinearActScratch, kSlot>(count);
}

constexpr int64_t kTileBytes = 256 * 1024;  // a tile's accumulator: at most half of a 512 KiB L2
constexpr int64_t kTileRows = 128;          // rows per tile: each GEMM call packs its block of w for these
constexpr int64_t kChunk = 512;             // epilogue values at a time (L1, with their output)
constexpr int64_t kGradRows = 64;           // rows per partial bias sum (fixed: bits independent of threads)

template <typename T>
constexpr bool kIs16 = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// A block of the output: rows [r0, r0 + rows), columns [c0, c0 + cols).
struct Tile {
  int64_t r0, rows, c0, cols;
};

// The epilogue on a tile: acc (row stride ld, bias already in) -> h, rounded to T (and kept as pre when
// asked), and y = act(h) rounded to T. For f32/f64, acc is pre (or y itself, in place) at the tile.
template <typename T>
void epilogue(const LinearActArgs<T>& a, const Tile& t, const compute_t<T>* acc, int64_t ld) {
  using C = compute_t<T>;
  parallel_for(t.rows, std::max<int64_t>(1, 32768 / t.cols), [&](int64_t begin, int64_t end) {
    C* tmp = scratch<C, 2>(kChunk);
    C* act = scratch<C, 4>(kChunk);
    T* rounded = scratch<T, 3>(kChunk);
    for (int64_t i = begin; i < end; ++i) {
      const C* row = acc + i * ld;
      const int64_t at = (t.r0 + i) * a.out + t.c0;
      T* y = a.y + at;
      for (int64_t j = 0; j < t.cols; j += kChunk) {
        const int64_t m = std::min(kChunk, t.cols - j);
        if constexpr (kIs16<T>) {  // h rounded to T (linear's output), then act(h) rounded
          T* h = a.pre != nullptr ? a.pre + at + j : rounded;
          convert(row + j, h, m);
          convert(h, tmp, m);
          act_values<C>(a.act, tmp, act, m);
          convert(act, y + j, m);
        } else if (static_cast<const void*>(row) != static_cast<const void*>(y)) {
          act_values<C>(a.act, row + j, y + j, m);
        } else {  // in place (no pre kept): through the L1 chunk
          act_values<C>(a.act, row + j, tmp, m);
          std::copy(tmp, tmp + m, y + j);
        }
      }
    }
  });
}

// One tile: the GEMM into its accumulator (bias pre-filled, beta 1, as linear's), then the epilogue while
// the accumulator is in cache. Called inside a parallel_for (one thread per tile: the nested GEMM and
// epilogue run serially) or on its own for the whole output (both threaded).
template <typename T>
void tile(const LinearActArgs<T>& a, const Tile& t, const compute_t<T>* bias, const float* w_f32) {
  using C = compute_t<T>;
  const int64_t in = a.in;
  C* acc = nullptr;
  int64_t ld = a.out;
  if constexpr (kIs16<T>) {
    acc = scratch<float, 0>(t.rows * t.cols);
    ld = t.cols;
  } else {
    acc = (a.pre != nullptr ? a.pre : a.y) + t.r0 * a.out + t.c0;
  }
  if (bias != nullptr) {
    for (int64_t i = 0; i < t.rows; ++i) std::copy(bias + t.c0, bias + t.c0 + t.cols, acc + i * ld);
  }
  const double beta = bias != nullptr ? 1.0 : 0.0;
  const T* x = a.x + t.r0 * a.ldx;
  // acc = x[tile rows] @ w[tile columns]^T (+ acc), operands of type A into an f32/f64 accumulator.
  const auto product = [&]<typename A>(const A* xa, int64_t lda, const A* w) {
    gemm(GemmArgs<A, C>{.trans_b = Trans::kYes,
                        .m = t.rows,
                        .n = t.cols,
                        .k = in,
                        .a = xa,
                        .lda = lda,
                        .b = w + t.c0 * in,
                        .ldb = in,
                        .c = acc,
                        .ldc = ld,
                        .beta = beta});
  };
  if constexpr (kIs16<T>) {
    if (w_f32 != nullptr) {  // widened: the tile's rows of x to f32, w widened once by the caller
      float* x_f32 = scratch<float, 1>(t.rows * in);
      for (int64_t i = 0; i < t.rows; ++i) convert(x + i * a.ldx, x_f32 + i * in, in);
      product(static_cast<const float*>(x_f32), in, w_f32);
    } else if constexpr (std::is_same_v<T, BFloat16>) {  // bf16 dot products (oneDNN), f32 sums unrounded
      product(x, a.ldx, a.w);
    }
  } else {
    product(x, a.ldx, a.w);
  }
  if (kIs16<T> || a.act != Activation::kNone || a.pre != nullptr) epilogue(a, t, acc, ld);
}

}  // namespace

template <typename T>
void linear_act_forward(const LinearActArgs<T>& a) {
  using C = compute_t<T>;
  if (a.rows == 0 || a.out == 0) return;
  // The bias and (16-bit operands without bf16 dot products) the weight in the compute type, once.
  CachedBuffer<C> bias(a.bias != nullptr ? a.out : 0);
  if (a.bias != nullptr) to_compute(a.bias, bias.get(), a.out);
  const C* bias_c = a.bias != nullptr ? bias.get() : nullptr;
  bool widen = false;
  if constexpr (std::is_same_v<T, Half>) widen = true;
  if constexpr (std::is_same_v<T, BFloat16>) widen = bf16_gemm_path() == Bf16GemmPath::kWidened;
  CachedBuffer<float> w(widen ? a.out * a.in : 0);
  if constexpr (kIs16<T>) {
    if (widen) {
      parallel_for(a.out, std::max<int64_t>(1, 16384 / std::max<int64_t>(a.in, 1)), [&](int64_t begin, int64_t end) {
        convert(a.w + begin * a.in, w.get() + begin * a.in, (end - begin) * a.in);
      });
    }
  }
  const float* w_f32 = widen ? w.get() : nullptr;

  // Tiles of up to kTileRows rows and as many columns (a multiple of 64) as fill kTileBytes. With fewer
  // tiles than two a thread, one threaded GEMM over the whole output, then the epilogue.
  const int64_t tile_rows = std::min(a.rows, kTileRows);
  const int64_t fit = kTileBytes / (tile_rows * static_cast<int64_t>(sizeof(C)));
  const int64_t tile_cols = std::min(a.out, std::max<int64_t>(64, fit / 64 * 64));
  const int64_t row_tiles = (a.rows + tile_rows - 1) / tile_rows, col_tiles = (a.out + tile_cols - 1) / tile_cols;
  if (row_tiles * col_tiles < 2 * static_cast<int64_t>(num_threads())) {
    tile(a, Tile{0, a.rows, 0, a.out}, bias_c, w_f32);
    return;
  }
  parallel_for(row_tiles * col_tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r0 = i / col_tiles * tile_rows, c0 = i % col_tiles * tile_cols;
      tile(a, Tile{r0, std::min(tile_rows, a.rows - r0), c0, std::min(tile_cols, a.out - c0)}, bias_c, w_f32);
    }
  });
}

template <typename T>
void linear_act_backward(const LinearActGradArgs<T>& a) {
  using C = compute_t<T>;
  if (a.rows == 0 || a.out == 0) return;
  const int64_t out = a.out, blocks = (a.rows + kGradRows - 1) / kGradRows;
  CachedBuffer<C> partial(a.dbias != nullptr ? blocks * out : 0);
  parallel_for(blocks, std::max<int64_t>(1, 32768 / (kGradRows * out)), [&](int64_t begin, int64_t end) {
    C* g = scratch<C, 3>(kChunk);
    C* s = scratch<C, 4>(kChunk);
    C* d = scratch<C, 5>(kChunk);
    for (int64_t b = begin; b < end; ++b) {
      C* sum = a.dbias != nullptr ? partial.get() + b * out : nullptr;
      if (sum != nullptr) std::fill(sum, sum + out, C(0));
      for (int64_t i = b * kGradRows; i < std::min(a.rows, (b + 1) * kGradRows); ++i) {
        for (int64_t j = 0; j < out; j += kChunk) {
          const int64_t m = std::min(kChunk, out - j), at = i * out + j;
          const C* dh = d;
          if constexpr (kIs16<T>) {
            convert(a.g + at, g, m);
            convert(a.saved + at, s, m);
            grad_values<C>(a.act, g, s, d, m);
            convert(d, a.dh + at, m);
            if (sum != nullptr) convert(a.dh + at, d, m);  // the bias gradient sums dh as rounded
          } else {
            grad_values<C>(a.act, a.g + at, a.saved + at, a.dh + at, m);
            dh = a.dh + at;
          }
          if (sum != nullptr) {
            for (int64_t c = 0; c < m; ++c) sum[j + c] += dh[c];
          }
        }
      }
    }
  });
  if (a.dbias == nullptr) return;
  parallel_for(out, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      C total = 0;
      for (int64_t b = 0; b < blocks; ++b) total += partial.get()[b * out + j];
      a.dbias[j] = static_cast<T>(total);
    }
  });
}

#define MT_INSTANTIATE_(T)                                           \
  template void linear_act_forward<T>(const LinearActArgs<T>& args); \
  template void linear_act_backward<T>(const LinearActGradArgs<T>& args)
MT_INSTANTIATE_(float);
MT_INSTANTIATE_(double);
MT_INSTANTIATE_(Half);
MT_INSTANTIATE_(BFloat16);
#undef MT_INSTANTIATE_

}  // namespace mantissa::cpu

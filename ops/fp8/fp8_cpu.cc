// FP8 CPU kernels (ops/fp8/fp8_cpu.h). quantize_fp8 is one sweep over each block of kBlock values: one loop
// widens each value (16-bit inputs by integer code, framework/convert.h's bits), folds it into the block's amax,
// scales it, counts an overflow and casts it (fp8::quantize_one), and the compiler vectorizes that loop whole,
// since framework/float8.h's cast is branch-free integer code; it is compiled for x86-64-v3 and for AVX-512,
// chosen at run time as convert() chooses. Threads take the blocks in contiguous runs; a run folds its blocks'
// amax and count locally and joins the totals once, with atomics (a maximum and a sum do not depend on the
// order, so neither does the result).
#include "ops/fp8/fp8_cpu.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <type_traits>

#include "framework/convert.h"
#include "framework/error.h"
#include "framework/parallel.h"
#include "ops/fp8/fp8_math.h"

namespace mantissa::cpu {
namespace {

constexpr int64_t kBlock = 256;                       // values per block: the unit the threads share out
constexpr int64_t kGrainBlocks = (1 << 15) / kBlock;  // blocks below which a second thread costs more than it saves
constexpr int64_t kGrain = 1 << 15;                   // the same in elements, for the kernels that split rows

// x's value as f32 bits, exactly (the bits convert() gives), in code the loops below vectorize.
inline uint32_t widen_bits(float x) { return std::bit_cast<uint32_t>(x); }
inline uint32_t widen_bits(BFloat16 x) { return static_cast<uint32_t>(x.bits) << 16; }
inline uint32_t widen_bits(Half x) { return fp8::half_to_f32_bits(x.bits); }

// What a run of blocks saw.
struct RunStats {
  uint32_t amax_bits = 0;
  int64_t overflow = 0;
  int64_t underflow = 0;
};

// One block of len <= kBlock values: the single sweep, one loop (the compiler keeps the amax and the count in
// vector registers and folds them across lanes once, at the end). Inlined into the two instruction-set variants
// below.
template <typename In, typename Format>
[[gnu::always_inline]] inline void quantize_block(const In* __restrict x, int64_t len, float scale,
                                                  Fp8Overflow overflow, uint8_t* __restrict out, RunStats& stats) {
  uint32_t m = 0, count = 0, zeros = 0;
  for (int64_t j = 0; j < len; ++j) {
    const uint32_t v = widen_bits(x[j]);
    out[j] = fp8::quantize_one<Format>(v, std::bit_cast<uint32_t>(std::bit_cast<float>(v) * scale), overflow, m, count,
                                       zeros);
  }
  stats.amax_bits = std::max(stats.amax_bits, m);
  stats.overflow += count;
  stats.underflow += zeros;
}

// The sweep is integer arithmetic bound (the cast is ~14 instructions per value), so 512-bit vectors halve it
// where the CPU has them; the x86-64-v3 baseline (AVX2) otherwise.
template <typename In, typename Format>
void quantize_block_avx2(const In* x, int64_t len, float scale, Fp8Overflow overflow, uint8_t* out, RunStats& stats) {
  quantize_block<In, Format>(x, len, scale, overflow, out, stats);
}
template <typename In, typename Format>
__attribute__((target("avx512f,avx512bw,avx512vl,prefer-vector-width=512"))) void quantize_block_avx512(
    const In* x, int64_t len, float scale, Fp8Overflow overflow, uint8_t* out, RunStats& stats) {
  quantize_block<In, Format>(x, len, scale, overflow, out, stats);
}

// max |x| over one block, the same sweep without the cast.
template <typename In>
void amax_block(const In* __restrict x, int64_t len, RunStats& stats) {
  uint32_t m = 0;
  for (int64_t j = 0; j < len; ++j) m = std::max(m, fp8::abs_bits(widen_bits(x[j])));
  stats.amax_bits = std::max(stats.amax_bits, m);
}

// Runs block(i, len, stats) over the blocks of [0, n) in parallel runs; each run's stats join the totals once.
template <typename Block>
Fp8PassStats sweep_blocks(int64_t n, Block&& block) {
  std::atomic<uint32_t> amax{0};
  std::atomic<int64_t> count{0}, zeros{0};
  parallel_for((n + kBlock - 1) / kBlock, kGrainBlocks, [&](int64_t first, int64_t last) {
    RunStats run;
    for (int64_t b = first; b < last; ++b) {
      const int64_t i = b * kBlock;
      block(i, std::min(kBlock, n - i), run);
    }
    uint32_t seen = amax.load(std::memory_order_relaxed);
    while (run.amax_bits > seen && !amax.compare_exchange_weak(seen, run.amax_bits, std::memory_order_relaxed)) {
    }
    count.fetch_add(run.overflow, std::memory_order_relaxed);
    zeros.fetch_add(run.underflow, std::memory_order_relaxed);
  });
  return {.amax_bits = amax.load(), .overflow = count.load(), .underflow = zeros.load()};
}

// The 256 values of each format, decoded once at compile time into bf16: the upper half of the exact f32.
template <typename Format>
constexpr std::array<BFloat16, 256> decode_table() {
  std::array<BFloat16, 256> t{};
  for (int b = 0; b < 256; ++b)
    t[static_cast<size_t>(b)] =
        BFloat16::from_bits(static_cast<uint16_t>(Format::to_f32_bits(static_cast<uint8_t>(b)) >> 16));
  return t;
}
constexpr std::array<BFloat16, 256> kE4M3Values = decode_table<Fp8E4M3Format>();
constexpr std::array<BFloat16, 256> kE5M2Values = decode_table<Fp8E5M2Format>();
static_assert(kE4M3Values[0x7e].bits == 0x43e0);  // 448
static_assert(kE5M2Values[0x01].bits == 0x3780);  // 2^-16, the smallest subnormal: exact in bf16

const BFloat16* values_of(DType fp8) {
  MT_ASSERT(is_float8(fp8), "FP8 kernel called with ", dtype_name(fp8));
  return fp8 == DType::kF8E4M3 ? kE4M3Values.data() : kE5M2Values.data();
}

}  // namespace

template <typename In>
Fp8PassStats quantize_fp8(const In* x, int64_t n, float scale, DType fp8, Fp8Overflow overflow, uint8_t* out,
                          ConvertIsa isa) {
  MT_ASSERT(is_float8(fp8), "quantize_fp8 kernel called with ", dtype_name(fp8));
  MT_CHECK(convert_isa_supported(isa), "quantize_fp8: this CPU does not support ", convert_isa_name(isa));
  const bool avx512 = isa == ConvertIsa::kAvx512;
  using BlockFn = void (*)(const In*, int64_t, float, Fp8Overflow, uint8_t*, RunStats&);
  const BlockFn block =
      fp8 == DType::kF8E4M3
          ? (avx512 ? &quantize_block_avx512<In, Fp8E4M3Format> : &quantize_block_avx2<In, Fp8E4M3Format>)
          : (avx512 ? &quantize_block_avx512<In, Fp8E5M2Format> : &quantize_block_avx2<In, Fp8E5M2Format>);
  return sweep_blocks(n,
                      [&](int64_t i, int64_t len, RunStats& run) { block(x + i, len, scale, overflow, out + i, run); });
}

template <typename In>
uint32_t amax_bits(const In* x, int64_t n) {
  return sweep_blocks(n, [&](int64_t i, int64_t len, RunStats& run) { amax_block(x + i, len, run); }).amax_bits;
}

void decode_fp8(const uint8_t* src, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, DType fp8,
                BFloat16* dst) {
  const BFloat16* __restrict values = values_of(fp8);
  parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t* __restrict s = src + i * row_stride;
      BFloat16* __restrict d = dst + i * cols;
      if (col_stride == 1) {
        for (int64_t j = 0; j < cols; ++j) d[j] = values[s[j]];
      } else {
        for (int64_t j = 0; j < cols; ++j) d[j] = values[s[j * col_stride]];
      }
    }
  });
}

template <typename Out>
void scaled_mm_epilogue(const float* acc, int64_t m, int64_t n, float scale, const float* bias, Out* out,
                        RowColScales rowcol) {
  const bool vectors = rowcol.row != nullptr || rowcol.col != nullptr;
  parallel_for(m, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
    float r[kBlock];
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
        const int64_t len = std::min(kBlock, n - j0);
        const float* a = acc + i * n + j0;
        const float* b = bias != nullptr ? bias + j0 : nullptr;
        if (vectors) {  // the column's scale, then the row's (fp8::epilogue_rowcol); a missing one is 1
          const float row = rowcol.row ? rowcol.row[i] : 1.0f;
          float col[kBlock];
          for (int64_t j = 0; j < len; ++j) col[j] = rowcol.col ? rowcol.col[j0 + j] : 1.0f;
          if (b != nullptr) {
            for (int64_t j = 0; j < len; ++j) r[j] = fp8::epilogue_rowcol(a[j], row, col[j], b[j]);
          } else {
            for (int64_t j = 0; j < len; ++j) r[j] = fp8::epilogue_rowcol(a[j], row, col[j]);
          }
        } else if (b != nullptr) {
          for (int64_t j = 0; j < len; ++j) r[j] = fp8::epilogue(a[j], scale, b[j]);
        } else {
          for (int64_t j = 0; j < len; ++j) r[j] = fp8::epilogue(a[j], scale);
        }
        Out* o = out + i * n + j0;
        if constexpr (std::is_same_v<Out, float>) {
          std::copy(r, r + len, o);
        } else {
          convert(r, o, len);
        }
      }
    }
  });
}

template Fp8PassStats quantize_fp8<float>(const float*, int64_t, float, DType, Fp8Overflow, uint8_t*, ConvertIsa);
template Fp8PassStats quantize_fp8<Half>(const Half*, int64_t, float, DType, Fp8Overflow, uint8_t*, ConvertIsa);
template Fp8PassStats quantize_fp8<BFloat16>(const BFloat16*, int64_t, float, DType, Fp8Overflow, uint8_t*, ConvertIsa);
template uint32_t amax_bits<float>(const float*, int64_t);
template uint32_t amax_bits<Half>(const Half*, int64_t);
template uint32_t amax_bits<BFloat16>(const BFloat16*, int64_t);
template void scaled_mm_epilogue<float>(const float*, int64_t, int64_t, float, const float*, float*, RowColScales);
template void scaled_mm_epilogue<Half>(const float*, int64_t, int64_t, float, const float*, Half*, RowColScales);
template void scaled_mm_epilogue<BFloat16>(const float*, int64_t, int64_t, float, const float*, BFloat16*,
                                           RowColScales);

}  // namespace mantissa::cpu

// FP8 CPU kernels (ops/fp8/fp8_cpu.h). The element loops work on blocks of kBlock values: 16-bit inputs widen
// with the vectorized converters, then separate plain loops (which the compiler vectorizes) fold the amax,
// scale, count overflows; only the cast itself, framework/float8.h's branchy rounding, runs element by
// element. Threads split the elements in contiguous chunks; each chunk's maximum and count join the totals
// under a lock, once per chunk.
#include "ops/fp8/fp8_cpu.h"

#include <algorithm>
#include <array>
#include <bit>
#include <mutex>
#include <type_traits>

#include "framework/convert.h"
#include "framework/error.h"
#include "framework/parallel.h"
#include "ops/fp8/fp8_math.h"

namespace mantissa::cpu {
namespace {

constexpr int64_t kBlock = 256;      // values per block: on the stack, in L1
constexpr int64_t kGrain = 1 << 15;  // elements below which a second thread costs more than it saves

// v[0, len) = x[0, len) as float (a copy for float: the loops below then read one buffer).
template <typename In>
void widen(const In* x, int64_t len, float* v) {
  if constexpr (std::is_same_v<In, float>) {
    std::copy(x, x + len, v);
  } else {
    convert(x, v, len);
  }
}

uint32_t block_amax_bits(const float* v, int64_t len) {
  uint32_t m = 0;
  for (int64_t j = 0; j < len; ++j) m = std::max(m, fp8::abs_bits(std::bit_cast<uint32_t>(v[j])));
  return m;
}

template <typename In, typename Format>
Fp8PassStats quantize_range(const In* x, int64_t begin, int64_t end, float scale, Fp8Overflow overflow, uint8_t* out) {
  Fp8PassStats stats;
  float v[kBlock];
  uint32_t y[kBlock];
  for (int64_t i = begin; i < end; i += kBlock) {
    const int64_t len = std::min(kBlock, end - i);
    widen(x + i, len, v);
    stats.amax_bits = std::max(stats.amax_bits, block_amax_bits(v, len));
    for (int64_t j = 0; j < len; ++j) y[j] = std::bit_cast<uint32_t>(v[j] * scale);
    int32_t count = 0;
    for (int64_t j = 0; j < len; ++j) count += fp8::overflows<Format>(y[j]) ? 1 : 0;
    stats.overflow += count;
    uint8_t* o = out + i;
    for (int64_t j = 0; j < len; ++j) o[j] = Format::from_f32_bits(y[j], overflow);
  }
  return stats;
}

// Runs range(begin, end) -> Fp8PassStats over [0, n) in parallel chunks and joins the results.
template <typename Range>
Fp8PassStats parallel_stats(int64_t n, Range&& range) {
  Fp8PassStats total;
  std::mutex mu;
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    const Fp8PassStats part = range(begin, end);
    std::lock_guard<std::mutex> lock(mu);
    total.amax_bits = std::max(total.amax_bits, part.amax_bits);
    total.overflow += part.overflow;
  });
  return total;
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
Fp8PassStats quantize_fp8(const In* x, int64_t n, float scale, DType fp8, Fp8Overflow overflow, uint8_t* out) {
  MT_ASSERT(is_float8(fp8), "quantize_fp8 kernel called with ", dtype_name(fp8));
  return parallel_stats(n, [&](int64_t begin, int64_t end) {
    return fp8 == DType::kF8E4M3 ? quantize_range<In, Fp8E4M3Format>(x, begin, end, scale, overflow, out)
                                 : quantize_range<In, Fp8E5M2Format>(x, begin, end, scale, overflow, out);
  });
}

template <typename In>
uint32_t amax_bits(const In* x, int64_t n) {
  return parallel_stats(n,
                        [&](int64_t begin, int64_t end) {
                          Fp8PassStats stats;
                          float v[kBlock];
                          for (int64_t i = begin; i < end; i += kBlock) {
                            const int64_t len = std::min(kBlock, end - i);
                            widen(x + i, len, v);
                            stats.amax_bits = std::max(stats.amax_bits, block_amax_bits(v, len));
                          }
                          return stats;
                        })
      .amax_bits;
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
void scaled_mm_epilogue(const float* acc, int64_t m, int64_t n, float scale, const float* bias, Out* out) {
  parallel_for(m, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
    float r[kBlock];
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
        const int64_t len = std::min(kBlock, n - j0);
        const float* a = acc + i * n + j0;
        if (bias != nullptr) {
          const float* b = bias + j0;
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

template Fp8PassStats quantize_fp8<float>(const float*, int64_t, float, DType, Fp8Overflow, uint8_t*);
template Fp8PassStats quantize_fp8<Half>(const Half*, int64_t, float, DType, Fp8Overflow, uint8_t*);
template Fp8PassStats quantize_fp8<BFloat16>(const BFloat16*, int64_t, float, DType, Fp8Overflow, uint8_t*);
template uint32_t amax_bits<float>(const float*, int64_t);
template uint32_t amax_bits<Half>(const Half*, int64_t);
template uint32_t amax_bits<BFloat16>(const BFloat16*, int64_t);
template void scaled_mm_epilogue<float>(const float*, int64_t, int64_t, float, const float*, float*);
template void scaled_mm_epilogue<Half>(const float*, int64_t, int64_t, float, const float*, Half*);
template void scaled_mm_epilogue<BFloat16>(const float*, int64_t, int64_t, float, const float*, BFloat16*);

}  // namespace mantissa::cpu

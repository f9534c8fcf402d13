// The tables of optim/low_precision.h.
#include "optim/low_precision.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "optim/dynamic_map_bits.h"

namespace mantissa::low_precision {
namespace {

constexpr uint32_t kSignedBits[kMapSize] = {MT_DYNAMIC_MAP_SIGNED_BITS};
constexpr uint32_t kUnsignedBits[kMapSize] = {MT_DYNAMIC_MAP_UNSIGNED_BITS};

struct Maps {
  float is_signed[kMapSize], is_unsigned[kMapSize];
  Maps() {
    for (int i = 0; i < kMapSize; ++i) {
      is_signed[i] = std::bit_cast<float>(kSignedBits[i]);
      is_unsigned[i] = std::bit_cast<float>(kUnsignedBits[i]);
    }
  }
};

const Maps& maps() {
  static const Maps m;
  return m;
}

}  // namespace

const float* dynamic_map(bool is_signed) { return is_signed ? maps().is_signed : maps().is_unsigned; }

void quantize_blockwise(const float* x, int64_t n, int64_t block, bool is_signed, uint8_t* codes, float* absmax,
                        CodeRounding rounding) {
  const float* map = dynamic_map(is_signed);
  for (int64_t b0 = 0, k = 0; b0 < n; b0 += block, ++k) {
    const int64_t b1 = std::min(n, b0 + block);
    float m = 0.0f;
    for (int64_t i = b0; i < b1; ++i) m = std::max(m, std::fabs(x[i]));
    absmax[k] = m;
    for (int64_t i = b0; i < b1; ++i) codes[i] = code_of(map, m > 0.0f ? x[i] / m : 0.0f, rounding);
  }
}

void dequantize_blockwise(const uint8_t* codes, const float* absmax, int64_t n, int64_t block, bool is_signed,
                          float* out) {
  const float* map = dynamic_map(is_signed);
  for (int64_t i = 0; i < n; ++i) out[i] = map[codes[i]] * absmax[i / block];
}

}  // namespace mantissa::low_precision

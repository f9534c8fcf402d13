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

// floor_index_fast's tables: per top-16-bit prefix, floor_index of the prefix's smallest float (0 for nan prefixes).
struct FloorTables {
  uint8_t below[2][1 << 16];
  FloorTables() {
    for (int s = 0; s < 2; ++s) {
      const float* map = s == 0 ? maps().is_signed : maps().is_unsigned;
      for (uint32_t h = 0; h < (1u << 16); ++h) {
        // Negative floats grow more negative with their bits: the prefix's smallest has all low bits set.
        const float smallest = bits_of_prefix(h);
        below[s][h] = static_cast<uint8_t>(smallest != smallest ? 0 : floor_index(map, smallest));
      }
    }
  }
  static float bits_of_prefix(uint32_t h) { return float_of((h & 0x8000u) != 0 ? (h << 16) | 0xffffu : h << 16); }
};

const FloorTables& floor_tables() {
  static const FloorTables t;
  return t;
}

}  // namespace

const float* dynamic_map(bool is_signed) { return is_signed ? maps().is_signed : maps().is_unsigned; }

namespace {

// floor_index_fast with the map and its table in hand (the quantizer's loop hoists them).
inline int floor_index_with(const float* map, const uint8_t* below, float v) {
  if (v != v) return 0;  // as the binary search: no entry is <= nan
  int lo = below[bits_of(v) >> 16];
  while (lo + 1 < kMapSize && map[lo + 1] <= v) ++lo;
  return lo;
}

}  // namespace

int floor_index_fast(bool is_signed, float v) {
  return floor_index_with(dynamic_map(is_signed), floor_tables().below[is_signed ? 0 : 1], v);
}

void quantize_blockwise(const float* x, int64_t n, int64_t block, bool is_signed, uint8_t* codes, float* absmax,
                        CodeRounding rounding) {
  const float* map = dynamic_map(is_signed);
  const uint8_t* below = floor_tables().below[is_signed ? 0 : 1];
  for (int64_t b0 = 0, k = 0; b0 < n; b0 += block, ++k) {
    const int64_t b1 = std::min(n, b0 + block);
    float m = 0.0f;
    for (int64_t i = b0; i < b1; ++i) m = std::max(m, std::fabs(x[i]));
    absmax[k] = m;
    for (int64_t i = b0; i < b1; ++i) {
      const float v = m > 0.0f ? x[i] / m : 0.0f;
      const uint8_t nearest = nearer_of(map, floor_index_with(map, below, v), v);
      codes[i] = rounding == CodeRounding::kUp ? at_or_above(map, nearest, v) : nearest;
    }
  }
}

void dequantize_blockwise(const uint8_t* codes, const float* absmax, int64_t n, int64_t block, bool is_signed,
                          float* out) {
  const float* map = dynamic_map(is_signed);
  for (int64_t i = 0; i < n; ++i) out[i] = map[codes[i]] * absmax[i / block];
}

}  // namespace mantissa::low_precision

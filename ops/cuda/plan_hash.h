// Hashing of the host-side plan keys (GEMM and convolution) under which cuBLASLt and cuDNN choices are
// cached: every field of a key goes through one 64-bit mixer, so keys that differ in any field spread.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace mantissa::gpu {

// splitmix64's finalizer: a bijection on 64 bits with full avalanche.
constexpr uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Order-dependent hash of a list of fields (any range of int64_t, or a braced list).
template <typename Fields>
constexpr uint64_t hash_fields(const Fields& fields) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int64_t f : fields) h = mix64(h ^ mix64(static_cast<uint64_t>(f) + 0x9e3779b97f4a7c15ull));
  return h;
}
constexpr uint64_t hash_fields(std::initializer_list<int64_t> fields) {
  return hash_fields<std::initializer_list<int64_t>>(fields);
}

}  // namespace mantissa::gpu

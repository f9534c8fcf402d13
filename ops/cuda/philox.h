// Philox4x32-10 (Salmon et al., SC'11; the Random123 reference) as __host__ __device__ code, and the
// mapping of a Generator's state to a position in its stream of 32-bit words, so that a CUDA kernel
// draws exactly the words Generator::next_u32 would: word q of the stream is word q % 4 of the block
// philox(key = seed, counter = q / 4). GPU dropout therefore equals the CPU's bit for bit.
#pragma once

#include <cstdint>

#include "framework/generator.h"
#include "ops/cuda/pointwise_math.h"

namespace mantissa::gpu {

struct Philox4 {
  uint32_t v[4];
};

// One block: counter words c0..c3, key words k0, k1 (little word first), ten rounds.
MT_HD inline Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;  // the key bump after the last round is never used
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// The block Generator(seed) refills with at 64-bit counter `block` (framework/generator.cc).
MT_HD inline Philox4 generator_block(uint64_t seed, uint64_t block) {
  return philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u,
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Generator::uniform_float of a word: 24 random bits in [0, 1).
MT_HD inline float uniform_from_word(uint32_t w) { return static_cast<float>(w >> 8) * 0x1.0p-24f; }

// The stream position (in words) of the next word `s` would give.
inline uint64_t stream_position(const GeneratorState& s) {
  return s.index < 4 ? (s.counter - 1) * 4 + s.index : s.counter * 4;
}

// The state after `words` more words from `s`.
inline GeneratorState advance(const GeneratorState& s, uint64_t words) {
  const uint64_t q = stream_position(s) + words;
  GeneratorState out = s;
  if (q % 4 == 0) {
    out.counter = q / 4;
    out.index = 4;
  } else {
    out.counter = q / 4 + 1;
    out.index = static_cast<uint32_t>(q % 4);
  }
  return out;
}

}  // namespace mantissa::gpu

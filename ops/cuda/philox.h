// The mapping of a Generator's state to a position in its stream of 32-bit words, so that a CUDA kernel
// draws exactly the words Generator::next_u32 would: word q of the stream is word q % 4 of the block
// philox(key = seed, counter = q / 4). GPU dropout therefore equals the CPU's bit for bit.
#pragma once

#include <cstdint>

#include "framework/generator.h"
#include "framework/philox.h"
#include "ops/pointwise_math.h"

namespace mantissa::gpu {

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

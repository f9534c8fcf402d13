// Philox4x32-10 (Salmon et al., SC'11; the Random123 reference): one block of four 32-bit words from a
// 128-bit counter and a 64-bit key. The CPU Generator and the CUDA dropout kernel both draw from it.
#pragma once

#include <cstdint>

#include "framework/host_device.h"

namespace mantissa {

struct Philox4 {
  uint32_t v[4];
};

// Counter words c0..c3, key words k0, k1 (little word first), ten rounds.
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

// A stream of one 32-bit word per element index: word index % 4 of the block whose counter is (index / 4 as two
// words, c2, c3) under `key`. Both devices' element loops read it one element at a time (the FP8 casts' stochastic
// rounding, the optimizers' bfloat16 rounding). Selects, not p.v[index & 3]: an array indexed at run time would
// live in a GPU thread's local memory.
MT_HD inline uint32_t philox_word(uint64_t index, uint32_t c2, uint32_t c3, uint64_t key) {
  const uint64_t block = index >> 2;
  const Philox4 p = philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), c2, c3,
                                  static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
  const uint32_t w = static_cast<uint32_t>(index & 3u);
  return w == 0u ? p.v[0] : (w == 1u ? p.v[1] : (w == 2u ? p.v[2] : p.v[3]));
}

}  // namespace mantissa

#include "framework/generator.h"

#include <cmath>
#include <numbers>

namespace mantissa {

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_lo, uint64_t counter_hi) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

void Generator::manual_seed(uint64_t seed) { set_state(GeneratorState{.seed = seed, .counter = 0, .index = 4}); }

void Generator::set_state(const GeneratorState& s) {
  state_ = s;
  if (state_.index < 4 && state_.counter > 0) block_ = philox4x32(state_.seed, state_.counter - 1);
}

void Generator::refill() {
  block_ = philox4x32(state_.seed, state_.counter);
  ++state_.counter;
  state_.index = 0;
}

uint32_t Generator::next_u32() {
  if (state_.index >= 4) refill();
  return block_[state_.index++];
}

uint64_t Generator::next_u64() {
  const uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

float Generator::uniform_float() { return static_cast<float>(next_u32() >> 8) * 0x1.0p-24f; }

double Generator::uniform_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Generator::normal() {
  const double u1 = 1.0 - uniform_double();  // (0, 1]: log stays finite
  const double u2 = uniform_double();
  const double r = std::sqrt(-2.0 * std::log(u1));
  return r * std::cos(2.0 * std::numbers::pi * u2);
}

Generator& default_generator() {
  thread_local Generator g;
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace mantissa

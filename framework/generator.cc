#include "framework/generator.h"

#include <cmath>
#include <numbers>

#include "framework/philox.h"

namespace mantissa {

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_lo, uint64_t counter_hi) {
  const Philox4 r = philox4x32_10(static_cast<uint32_t>(counter_lo), static_cast<uint32_t>(counter_lo >> 32),
                                  static_cast<uint32_t>(counter_hi), static_cast<uint32_t>(counter_hi >> 32),
                                  static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
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

// Generator: a counter-based Philox4x32-10 random stream. Its whole state is (seed, counter, index),
// so it can be saved into a checkpoint and restored exactly, and a GPU kernel can reproduce it.
#pragma once

#include <array>
#include <cstdint>

namespace mantissa {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t counter = 0;  // 128-bit blocks consumed
  uint32_t index = 4;    // next word within the current block (4: block exhausted)
  friend bool operator==(const GeneratorState&, const GeneratorState&) = default;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) { manual_seed(seed); }

  void manual_seed(uint64_t seed);
  uint64_t seed() const { return state_.seed; }
  GeneratorState state() const { return state_; }
  void set_state(const GeneratorState& s);

  uint32_t next_u32();
  uint64_t next_u64();
  float uniform_float();    // [0, 1) with 24 random bits
  double uniform_double();  // [0, 1) with 53 random bits
  double normal();          // standard normal (Box-Muller, one value per two uniforms)

 private:
  void refill();
  GeneratorState state_;
  std::array<uint32_t, 4> block_{};
};

// The process-wide default generator used when an op is given none.
Generator& default_generator();
void manual_seed(uint64_t seed);

// One Philox4x32-10 block for (key, counter): exposed so tests and GPU kernels can check the stream.
std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_lo, uint64_t counter_hi = 0);

}  // namespace mantissa

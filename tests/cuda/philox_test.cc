// Philox4x32-10 (framework/philox.h, shared by the CPU Generator and the CUDA dropout kernel) on the CPU:
// Random123's published known-answer vectors, agreement with the Generator's own blocks, and the mapping
// of a Generator state to its stream position (so the GPU dropout mask is the CPU's).
#include "ops/cuda/philox.h"

#include <gtest/gtest.h>

#include "framework/generator.h"

namespace mantissa {
namespace {

// Random123 v1.14.0, tests/kat_vectors: philox4x32 10 <counter x4> <key x2> <output x4>.
TEST(CudaPhilox, Random123KnownAnswers) {
  struct Kat {
    uint32_t c[4], k[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& kat : kats) {
    const Philox4 r = philox4x32_10(kat.c[0], kat.c[1], kat.c[2], kat.c[3], kat.k[0], kat.k[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], kat.out[i]) << "word " << i << " of counter " << kat.c[0];
  }
}

TEST(CudaPhilox, SameBlocksAsTheGenerator) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{0x5eed}, uint64_t{0x123456789abcdefULL}}) {
    for (uint64_t block : {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{1} << 33}) {
      const auto want = philox4x32(seed, block);
      const Philox4 got = gpu::generator_block(seed, block);
      for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want[static_cast<size_t>(i)]);
    }
  }
}

TEST(CudaPhilox, StreamPositionReproducesTheGeneratorsWords) {
  // From states at every index within a block, word q of the stream (as the kernel computes it) equals
  // the generator's q-th next_u32, and advance() gives the state the generator reaches.
  for (int skip = 0; skip < 9; ++skip) {
    Generator g(42);
    for (int i = 0; i < skip; ++i) g.next_u32();
    const GeneratorState start = g.state();
    const uint64_t pos = gpu::stream_position(start);
    for (uint64_t w = 0; w < 11; ++w) {
      const uint64_t q = pos + w;
      const uint32_t want = g.next_u32();
      EXPECT_EQ(gpu::generator_block(start.seed, q / 4).v[q % 4], want) << "skip " << skip << " word " << w;
    }
    Generator replay(42);
    replay.set_state(gpu::advance(start, 11));
    EXPECT_EQ(replay.state(), g.state()) << "skip " << skip;
    EXPECT_EQ(replay.next_u32(), g.next_u32()) << "skip " << skip;
  }
  // 24 random bits: the largest word maps to 1 - 2^-24, the smallest to 0.
  EXPECT_EQ(gpu::uniform_from_word(0xffffffffu), 0x0.ffffffp0f);
  EXPECT_EQ(gpu::uniform_from_word(0xffu), 0.0f);
}

}  // namespace
}  // namespace mantissa

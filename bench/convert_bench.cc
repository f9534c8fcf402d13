// Bulk f32 <-> f16/bf16 conversion per instruction set (framework/convert.h), single-threaded, on
// arrays that fit in L2 (64 Ki elements) and that do not (16 Mi). Bytes/s counts source plus destination.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "framework/convert.h"

namespace mantissa {
namespace {

enum class Direction { kF32ToF16, kF16ToF32, kF32ToBF16, kBF16ToF32 };

void BM_Convert(benchmark::State& state, ConvertIsa isa, Direction dir) {
  if (!convert_isa_supported(isa)) {
    state.SkipWithError("instruction set not supported on this CPU");
    return;
  }
  const int64_t n = state.range(0);
  std::vector<float> f(static_cast<size_t>(n));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  for (float& v : f) v = dist(rng);
  std::vector<Half> h(f.size());
  std::vector<BFloat16> b(f.size());
  const ConvertKernels& k = convert_kernels(isa);
  for (auto _ : state) {
    switch (dir) {
      case Direction::kF32ToF16: k.f32_to_f16(f.data(), h.data(), n); break;
      case Direction::kF16ToF32: k.f16_to_f32(h.data(), f.data(), n); break;
      case Direction::kF32ToBF16: k.f32_to_bf16(f.data(), b.data(), n); break;
      case Direction::kBF16ToF32: k.bf16_to_f32(b.data(), f.data(), n); break;
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * 6);
}

#define MT_CONVERT_BENCH(isa, dir) \
  BENCHMARK_CAPTURE(BM_Convert, isa##_##dir, ConvertIsa::isa, Direction::dir)->Arg(1 << 16)->Arg(1 << 24)

MT_CONVERT_BENCH(kScalar, kF32ToF16);
MT_CONVERT_BENCH(kAvx2, kF32ToF16);
MT_CONVERT_BENCH(kAvx512, kF32ToF16);
MT_CONVERT_BENCH(kScalar, kF16ToF32);
MT_CONVERT_BENCH(kAvx2, kF16ToF32);
MT_CONVERT_BENCH(kAvx512, kF16ToF32);
MT_CONVERT_BENCH(kScalar, kF32ToBF16);
MT_CONVERT_BENCH(kAvx2, kF32ToBF16);
MT_CONVERT_BENCH(kAvx512, kF32ToBF16);
MT_CONVERT_BENCH(kScalar, kBF16ToF32);
MT_CONVERT_BENCH(kAvx2, kBF16ToF32);
MT_CONVERT_BENCH(kAvx512, kBF16ToF32);

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();

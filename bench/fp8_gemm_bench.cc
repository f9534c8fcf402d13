// FP8 on the CPU, and what it costs: the scaled FP8 matmul (ops/fp8/fp8.h scaled_mm: E4M3 x E4M3 with per-tensor
// scales, f32 accumulation, bf16 out) beside the f32 and bf16 matmuls of the same shape, and the per-tensor
// quantization (quantize_fp8: amax, cast and overflow count in one pass) in GB/s of its input. A CPU has no FP8
// arithmetic: scaled_mm decodes both operands exactly to bf16 and runs the bf16 GEMM into an f32 accumulator,
// so its ceiling is the bf16 matmul; the point of FP8 here is exactness (the bits an H100 computes from), and
// its cost is the decode and the epilogue around that GEMM. Counter GFLOP = 2 m n k per call. bench/compare_fp8.sh runs
// this beside bench/pytorch/fp8_gemm.py (torch._scaled_mm). The cast cases time one cast as fp8_linear makes it
// (amp::fp8_cast on a bf16 [m, k] input: the quantize pass and the scaling-state ops around it), delayed and
// dynamic. The scaled_mm_e4m3_hopper cases sum as Hopper's FP8 tensor core does, bit for bit
// (ops/fp8/accumulator.h): what judging a recipe under the real accumulator costs on the CPU.
//   ./build/bench/fp8_gemm_bench --benchmark_filter=1024
#include <benchmark/benchmark.h>

#include <cstdint>
#include <omp.h>
#include <string>
#include <vector>

#include "amp/fp8_linear.h"
#include "framework/tensor.h"
#include "ops/fp8/accumulator.h"
#include "ops/fp8/fp8.h"
#include "ops/matmul/matmul.h"

namespace mantissa {
namespace {

struct Shape3 {
  const char* name;
  int64_t m, n, k;
};
// Square sizes, and the GEMMs of the models mantissa-train trains in fp8: the MLP's first layer at batch 128
// (784 -> 1024) and the GPT's MLP up-projection at batch 32 x 128 tokens (128 -> 512).
constexpr Shape3 kShapes[] = {{"square1024", 1024, 1024, 1024},
                              {"square2048", 2048, 2048, 2048},
                              {"mlp_fc1_b128", 128, 1024, 784},
                              {"gpt_mlp_up_b32", 4096, 512, 128}};

Tensor values(int64_t rows, int64_t cols, float scale) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = scale * static_cast<float>(static_cast<int64_t>(i * 7919 % 1000) - 500) / 500.0f;
  return from_vector<float>(v, {rows, cols});
}

void set_flops(benchmark::State& state, const Shape3& s) {
  state.counters["GFLOP"] =
      benchmark::Counter(2e-9 * static_cast<double>(s.m * s.n * s.k), benchmark::Counter::kIsIterationInvariantRate);
}

// x [m, k] @ w[n, k]^T, as linear computes it.
void BM_mm(benchmark::State& state, Shape3 s, DType dtype) {
  const Tensor x = values(s.m, s.k, 1.0f).to(dtype);
  const Tensor w = values(s.n, s.k, 0.5f).to(dtype);
  for (auto _ : state) benchmark::DoNotOptimize(mm(x, w.t()));
  set_flops(state, s);
}

void BM_scaled_mm(benchmark::State& state, Shape3 s, Fp8Accumulator accumulator) {
  Fp8AccumulatorScope model(accumulator);
  const Tensor one = scalar_tensor(1.0, {.dtype = DType::kF32});
  const Tensor x = quantize_fp8(values(s.m, s.k, 1.0f), one, DType::kF8E4M3, Fp8Overflow::kSaturate).data;
  const Tensor w = quantize_fp8(values(s.n, s.k, 0.5f), one, DType::kF8E4M3, Fp8Overflow::kSaturate).data;
  const Tensor inv = scalar_tensor(1.0, {.dtype = DType::kF32});
  for (auto _ : state) benchmark::DoNotOptimize(scaled_mm(x, w.t(), inv, inv, DType::kBF16));
  set_flops(state, s);
}

void set_input_bytes(benchmark::State& state, const Tensor& x) {
  state.counters["GB"] =
      benchmark::Counter(1e-9 * static_cast<double>(x.numel() * static_cast<int64_t>(element_size(x.dtype()))),
                         benchmark::Counter::kIsIterationInvariantRate);
}

void BM_quantize(benchmark::State& state, Shape3 s, DType dtype) {
  const Tensor x = values(s.m, s.k, 3.0f).to(dtype);
  const Tensor scale = scalar_tensor(100.0, {.dtype = DType::kF32});
  for (auto _ : state) benchmark::DoNotOptimize(quantize_fp8(x, scale, DType::kF8E4M3, Fp8Overflow::kSaturate));
  set_input_bytes(state, x);
}

// One input cast of fp8_linear with its state recorded: the delayed recipe's cast (quantize, then the amax and
// the overflow count folded into the state), or the dynamic one's (amax, the scale from it, quantize, record).
void BM_fp8_cast(benchmark::State& state, Shape3 s, amp::Fp8Scaling scaling) {
  const Tensor x = values(s.m, s.k, 3.0f).to(DType::kBF16);
  amp::Fp8TensorState st =
      amp::Fp8TensorState::make({.scaling = scaling}, DType::kF8E4M3, Fp8Overflow::kSaturate, kCPU);
  for (auto _ : state) benchmark::DoNotOptimize(amp::fp8_cast(st, x, amp::Fp8StateUpdate::kRecord));
  set_input_bytes(state, x);
}

void register_all() {
  for (const Shape3& s : kShapes) {
    const std::string shape = s.name;
    for (benchmark::internal::Benchmark* b :
         {benchmark::RegisterBenchmark(("mm_f32/" + shape).c_str(), BM_mm, s, DType::kF32),
          benchmark::RegisterBenchmark(("mm_bf16/" + shape).c_str(), BM_mm, s, DType::kBF16),
          benchmark::RegisterBenchmark(("scaled_mm_e4m3/" + shape).c_str(), BM_scaled_mm, s, Fp8Accumulator::f32()),
          benchmark::RegisterBenchmark(("scaled_mm_e4m3_hopper/" + shape).c_str(), BM_scaled_mm, s,
                                       Fp8Accumulator::hopper()),
          benchmark::RegisterBenchmark(("quantize_e4m3/" + shape).c_str(), BM_quantize, s, DType::kF32),
          benchmark::RegisterBenchmark(("quantize_e4m3_bf16/" + shape).c_str(), BM_quantize, s, DType::kBF16),
          benchmark::RegisterBenchmark(("cast_delayed/" + shape).c_str(), BM_fp8_cast, s, amp::Fp8Scaling::kDelayed),
          benchmark::RegisterBenchmark(("cast_dynamic/" + shape).c_str(), BM_fp8_cast, s, amp::Fp8Scaling::kDynamic)}) {
      b->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
}

}  // namespace
}  // namespace mantissa

int main(int argc, char** argv) {
  benchmark::AddCustomContext("omp_threads", std::to_string(omp_get_max_threads()));
  mantissa::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

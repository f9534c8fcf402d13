// The mixed-precision passes on the GPU over GPT-2 small's parameter list (148 tensors, 124 M f32
// values): the fused Adam and SGD steps (scaled, with and without a bf16 working copy), the unscale-and-
// check pass, the loss-scale update and AdamW under the precision ladder's rungs. Reports the memory
// bandwidth each pass reaches (bytes it must move / time), to set against the device's peak. Skips with a
// message without a GPU.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/unscale_grads.h"
#include "bench/ladder_rungs.h"
#include "framework/cuda/device.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace mantissa {
namespace {

bool have_device(benchmark::State& state) {
  if (cuda_device_count() > 0) return true;
  state.SkipWithError(("no CUDA device: " + cuda_unavailable_reason()).c_str());
  return false;
}

// Waits for the GPU's queued work: a device -> host copy waits for the stream (benchmarks do not get the
// CUDA headers). Costs one tiny copy per iteration, noise beside passes over 124 M values.
void wait_for_gpu() {
  static const Tensor probe = zeros({}, {.device = cuda(0)});
  (void)probe.item();
}

// GPT-2 small (12 layers, 768 wide, 1024 positions, 50257 tokens padded to 50304): its parameters on
// cuda:0 with grads, in `dtype` (bf16 for the precision ladder's rungs without masters).
std::vector<NamedTensor> gpt2_small_params(DType dtype = DType::kF32) {
  std::vector<std::pair<std::string, Shape>> shapes{{"wte", {50304, 768}}, {"wpe", {1024, 768}}};
  for (int l = 0; l < 12; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (auto [name, shape] : std::vector<std::pair<std::string, Shape>>{{"ln_1.weight", {768}},
                                                                         {"ln_1.bias", {768}},
                                                                         {"attn.c_attn.weight", {2304, 768}},
                                                                         {"attn.c_attn.bias", {2304}},
                                                                         {"attn.c_proj.weight", {768, 768}},
                                                                         {"attn.c_proj.bias", {768}},
                                                                         {"ln_2.weight", {768}},
                                                                         {"ln_2.bias", {768}},
                                                                         {"mlp.c_fc.weight", {3072, 768}},
                                                                         {"mlp.c_fc.bias", {3072}},
                                                                         {"mlp.c_proj.weight", {768, 3072}},
                                                                         {"mlp.c_proj.bias", {768}}})
      shapes.push_back({h + name, shape});
  }
  shapes.push_back({"ln_f.weight", {768}});
  shapes.push_back({"ln_f.bias", {768}});
  std::vector<NamedTensor> params;
  for (const auto& [name, shape] : shapes) {
    Tensor p = full(shape, 0.01, {.dtype = dtype, .device = cuda(0)});
    p.set_requires_grad(true);
    p.set_grad(full(shape, 0.5, {.dtype = dtype, .device = cuda(0)}));
    params.push_back({name, p});
  }
  return params;
}

int64_t total_numel(const std::vector<NamedTensor>& params) {
  int64_t n = 0;
  for (const auto& p : params) n += p.tensor.numel();
  return n;
}

void report(benchmark::State& state, int64_t numel, double bytes_per_element) {
  state.counters["GBps"] = benchmark::Counter(static_cast<double>(numel) * bytes_per_element / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["params"] = static_cast<double>(numel);
}

enum class Copy { kNone, kBF16 };

// Adam's fused step: reads p, g, m, v and writes p, m, v (28 bytes per value), plus 2 for the copy.
void BM_FusedAdam(benchmark::State& state, Copy copy) {
  if (!have_device(state)) return;
  auto params = gpt2_small_params();
  Adam opt(params, {.lr = 1e-4});
  if (copy == Copy::kBF16) opt.enable_working_copies(DType::kBF16);
  const GradScaling scaling{.inv_scale = full({}, 1.0 / 1024.0, {.device = cuda(0)}),
                            .found_inf = zeros({}, {.device = cuda(0)})};
  opt.step(scaling);  // creates the state
  wait_for_gpu();
  for (auto _ : state) {
    opt.step(scaling);
    wait_for_gpu();
  }
  report(state, total_numel(params), copy == Copy::kBF16 ? 30.0 : 28.0);
}
BENCHMARK_CAPTURE(BM_FusedAdam, plain, Copy::kNone)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_FusedAdam, bf16_copy, Copy::kBF16)->UseRealTime()->Unit(benchmark::kMillisecond);

// AdamW under each rung of the precision ladder (optim/cuda/ladder.cu; bench/ladder_rungs.h), against BM_FusedAdam
// above: BM_LadderAdamW/StateBf16, BM_LadderAdamW/Bf16Stochastic8bit, ... With fp32 masters it writes their bf16
// working copy too.
void BM_LadderAdamW(benchmark::State& state, PrecisionLadder ladder) {
  if (!have_device(state)) return;
  const bool masters = ladder.master_weights == MasterWeights::kFp32;
  auto params = gpt2_small_params(masters ? DType::kF32 : DType::kBF16);
  AdamW opt(params, {.lr = 1e-4}, ladder);
  if (masters) opt.enable_working_copies(DType::kBF16);
  opt.step();  // creates the state
  wait_for_gpu();
  for (auto _ : state) {
    opt.step();
    wait_for_gpu();
  }
  state.SetLabel(ladder.str());
  report(state, total_numel(params), adam_step_bytes(ladder, /*working_copy=*/masters));
}
const bool kLadderBenchmarks = [] {
  for (const LadderRung& rung : ladder_rungs())
    benchmark::RegisterBenchmark((std::string("BM_LadderAdamW/") + rung.name).c_str(),
                                 [ladder = rung.ladder](benchmark::State& s) { BM_LadderAdamW(s, ladder); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  return true;
}();

// SGD with momentum: reads p, g, buf and writes p, buf (20 bytes per value).
void BM_FusedSgdMomentum(benchmark::State& state) {
  if (!have_device(state)) return;
  auto params = gpt2_small_params();
  SGD opt(params, {.lr = 1e-2, .momentum = 0.9});
  const GradScaling scaling{.inv_scale = full({}, 1.0 / 1024.0, {.device = cuda(0)}),
                            .found_inf = zeros({}, {.device = cuda(0)})};
  opt.step(scaling);
  wait_for_gpu();
  for (auto _ : state) {
    opt.step(scaling);
    wait_for_gpu();
  }
  report(state, total_numel(params), 20.0);
}
BENCHMARK(BM_FusedSgdMomentum)->UseRealTime()->Unit(benchmark::kMillisecond);

// The unscale-and-check pass: reads and writes every grad (8 bytes per value). inv_scale is 1 so the
// grads keep their values across iterations.
void BM_UnscaleAndCheck(benchmark::State& state) {
  if (!have_device(state)) return;
  auto params = gpt2_small_params();
  SGD opt(params, {.lr = 1e-2});
  const Tensor inv_scale = full({}, 1.0, {.device = cuda(0)}), found_inf = zeros({}, {.device = cuda(0)});
  for (auto _ : state) {
    unscale_grads_(opt, inv_scale, found_inf);
    wait_for_gpu();
  }
  report(state, total_numel(params), 8.0);
}
BENCHMARK(BM_UnscaleAndCheck)->UseRealTime()->Unit(benchmark::kMillisecond);

// The scaler's whole iteration without a host read: check, fused Adam step, scale update.
void BM_ScalerIteration(benchmark::State& state) {
  if (!have_device(state)) return;
  auto params = gpt2_small_params();
  Adam opt(params, {.lr = 1e-4});
  amp::GradScaler scaler;
  scaler.enqueue_step(opt);
  scaler.update();
  wait_for_gpu();
  for (auto _ : state) {
    scaler.enqueue_step(opt);
    scaler.update();
    wait_for_gpu();
  }
  report(state, total_numel(params), 32.0);  // the check's read of g (4) + Adam's 28
}
BENCHMARK(BM_ScalerIteration)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();

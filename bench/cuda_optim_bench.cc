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

// AdamW under a rung of the precision ladder (optim/cuda/ladder.cu), against BM_FusedAdam above. Bytes per value
// it must move: the weight read and written (bf16 2 + 2 without masters; f32 4 + 4 and the bf16 copy's 2 with
// them), the grad (2 or 4), both moments read and written (fp32 16, bf16 8, 8-bit 4; the per-block absmax is
// noise) and, under kahan, the bf16 compensation read and written (4).
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
  const double state_bytes = ladder.optimizer_state == StateStorage::kFp32   ? 16.0
                             : ladder.optimizer_state == StateStorage::kBf16 ? 8.0
                                                                             : 4.0;
  const double weight_bytes = masters ? 4 + 4 + 2 + 4 : 2 + 2 + 2;
  const double kahan_bytes = ladder.update_rounding == UpdateRounding::kKahan ? 4.0 : 0.0;
  state.SetLabel(ladder.str());
  report(state, total_numel(params), weight_bytes + state_bytes + kahan_bytes);
}
BENCHMARK_CAPTURE(BM_LadderAdamW, bf16_weights, PrecisionLadder{.master_weights = MasterWeights::kNone})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LadderAdamW, bf16_stochastic,
                  PrecisionLadder{.master_weights = MasterWeights::kNone,
                                  .update_rounding = UpdateRounding::kStochastic})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LadderAdamW, bf16_kahan,
                  PrecisionLadder{.master_weights = MasterWeights::kNone, .update_rounding = UpdateRounding::kKahan})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LadderAdamW, bf16_stochastic_8bit,
                  PrecisionLadder{.master_weights = MasterWeights::kNone,
                                  .update_rounding = UpdateRounding::kStochastic,
                                  .optimizer_state = StateStorage::k8bit})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LadderAdamW, bf16_kahan_8bit,
                  PrecisionLadder{.master_weights = MasterWeights::kNone,
                                  .update_rounding = UpdateRounding::kKahan,
                                  .optimizer_state = StateStorage::k8bit})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LadderAdamW, state_bf16, PrecisionLadder{.optimizer_state = StateStorage::kBf16})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LadderAdamW, state_8bit, PrecisionLadder{.optimizer_state = StateStorage::k8bit})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

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

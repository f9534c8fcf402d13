// Mixed-precision inference: the forward of the MLP (784-1024-1024-10), the CNN (models/cnn.h, eval mode)
// and the character GPT (n_layer 4, n_head 4, n_embd 256, block 128: logits for all 128 positions) with grad
// mode off, in f32 and under bf16 and fp16 autocast over the fp32 weights (what PyTorch's inference_mode
// plus autocast does): latency at batch 1, throughput at batch 256 (the GPT at batch 32: 4096 positions).
// bf16_wc / fp16_wc hold the weights' 16-bit copies for the whole run (amp::ScopedWorkingCopies).
// Each case also reports the latency of one call at the median and the 99th percentile (p50_ms, p99_ms, over
// the timed calls; the model and inputs are built once per case, outside them) and how far its outputs are
// from the f32 outputs on the same inputs: max_abs_diff and top1_agree (the fraction of rows, positions for
// the GPT, whose argmax is the f32 one).
// The PyTorch side is bench/pytorch/inference.py; bench/compare_inference.sh runs both and prints ratios.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "models/cnn.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

const GPTConfig kGpt{.vocab_size = 65, .n_layer = 4, .n_head = 4, .n_embd = 256, .block_size = 128};

struct Case {
  std::shared_ptr<Module> model;
  std::function<Tensor(const Tensor&)> forward;  // inputs -> logits [rows, classes]
  Tensor inputs;
};

Case make_case(const std::string& name, int64_t batch) {
  Generator init(0), data(1);
  Case c;
  if (name == "mlp") {
    auto m = std::make_shared<MLP>(784, std::vector<int64_t>{1024, 1024}, 10, MLPOptions{.generator = &init});
    c.forward = [m](const Tensor& x) { return m->forward(x); };
    c.model = m;
    c.inputs = randn({batch, 784}, {}, &data);
  } else if (name == "cnn") {
    auto m = std::make_shared<CNN>(CNNOptions{.generator = &init});
    c.forward = [m](const Tensor& x) { return m->forward(x); };
    c.model = m;
    c.inputs = randn({batch, 1, CNN::kImageSize, CNN::kImageSize}, {}, &data);
  } else {
    auto m = std::make_shared<GPT>(kGpt, GPTOptions{.generator = &init});
    c.forward = [m](const Tensor& idx) { return m->forward(idx).logits.reshape({-1, kGpt.vocab_size}); };
    c.model = m;
    std::vector<int64_t> tokens(static_cast<size_t>(batch * kGpt.block_size));
    for (int64_t& t : tokens) t = static_cast<int64_t>(data.next_u32() % kGpt.vocab_size);
    c.inputs = from_vector<int64_t>(tokens, {batch, kGpt.block_size});
  }
  c.model->eval();
  return c;
}

void BM_Inference(benchmark::State& state, const std::string& model, std::optional<DType> autocast, int64_t batch,
                  bool working_copies) {
  Case c = make_case(model, batch);
  NoGradGuard no_grad;
  // Persistent 16-bit weights (beyond PyTorch): the forward then casts no weight.
  std::optional<amp::ScopedWorkingCopies> copies;
  if (working_copies) copies.emplace(c.model->parameters(), *autocast);
  auto run = [&] {
    if (!autocast) return c.forward(c.inputs);
    amp::AutocastGuard guard({.dtype = *autocast});
    return c.forward(c.inputs);
  };
  const Tensor reference = c.forward(c.inputs);  // f32
  const Tensor out = run().to(DType::kF32);
  for (int i = 0; i < 3; ++i) run();  // warm the caches
  std::vector<double> latencies;      // ms per call, for the tail: the mean hides it
  latencies.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor logits = run();
    benchmark::DoNotOptimize(logits.data_ptr());
    latencies.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(latencies.begin(), latencies.end());
  auto quantile = [&](double q) {
    const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(latencies.size())));
    return latencies.empty() ? 0.0 : latencies[std::clamp<size_t>(i, 1, latencies.size()) - 1];
  };
  state.counters["p50_ms"] = quantile(0.50);
  state.counters["p99_ms"] = quantile(0.99);
  const int64_t rows = reference.size(0);
  state.SetItemsProcessed(state.iterations() * batch);  // samples (sequences for the GPT) per second
  state.counters["max_abs_diff"] = max(abs(sub(out, reference))).item<float>();
  state.counters["top1_agree"] =
      sum(eq(argmax(out, 1), argmax(reference, 1)).to(DType::kF32)).item<float>() / static_cast<float>(rows);
}

const bool registered = [] {
  struct Precision {
    const char* name;
    std::optional<DType> autocast;
    bool working_copies;
  };
  const Precision precisions[] = {{"f32", std::nullopt, false},
                                  {"bf16", DType::kBF16, false},
                                  {"bf16_wc", DType::kBF16, true},
                                  {"fp16", DType::kF16, false},
                                  {"fp16_wc", DType::kF16, true}};
  for (const char* model : {"mlp", "cnn", "gpt"}) {
    const int64_t big = std::string(model) == "gpt" ? 32 : 256;
    for (const Precision& p : precisions) {
      for (const int64_t batch : {int64_t{1}, big}) {
        const std::string name = std::string("BM_Inference/") + model + "/" + p.name + "/" + std::to_string(batch);
        benchmark::RegisterBenchmark(
            name.c_str(),
            [model, p, batch](benchmark::State& s) { BM_Inference(s, model, p.autocast, batch, p.working_copies); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();

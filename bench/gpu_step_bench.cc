// Whole training steps on one GPU (issue 7's benchmark), the mantissa side of bench/compare_gpu.sh; the
// PyTorch side is bench/pytorch/gpu_step.py with the same models, shapes, optimizer and precisions:
//   gpt: GPT-2 small's shape (12 layers, 12 heads, 768 wide, sequence 1024, vocabulary 50304), batch 8;
//   cnn: models/cnn.h, batch 512.
// One step = zero_grad, forward + mean cross-entropy, backward, AdamW; fp16 = autocast f16 + GradScaler
// (the sync-free enqueue_step), bf16 = autocast bf16, fp32 = exact f32 GEMMs (no TF32). Each step ends with
// a synchronization so its wall time is the GPU's. Prints, after the measured bf16 GEMM peak, one line per
// (model, precision) in the PyTorch script's format:
//   mantissa <model> <precision> ms=<median> items_per_s=<tokens or samples> mfu=<> peak_gib=<>
// Not a Google Benchmark program: the comparison needs these exact lines. Exits 0 with a message when
// there is no GPU.  Usage: gpu_step_bench [--models=gpt,cnn] [--precisions=fp32,fp16,bf16] [--steps=20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "framework/cuda/allocator.h"
#include "framework/cuda/device.h"
#include "framework/random.h"
#include "models/cnn.h"
#include "models/gpt.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "optim/adam.h"

namespace mantissa {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// 2 m n k per product of 8192^3 bf16 matrices through mantissa's GEMM (cuBLASLt), TFLOP/s.
double bf16_peak_tflops() {
  const Tensor a = randn({8192, 8192}).to(DType::kBF16).to(cuda(0));
  const Tensor b = randn({8192, 8192}).to(DType::kBF16).to(cuda(0));
  for (int i = 0; i < 3; ++i) (void)mm(a, b);
  cuda_synchronize(0);
  const auto t0 = Clock::now();
  for (int i = 0; i < 20; ++i) (void)mm(a, b);
  cuda_synchronize(0);
  return 2.0 * 8192.0 * 8192.0 * 8192.0 * 20 / seconds_since(t0) / 1e12;
}

struct Workload {
  std::function<Tensor()> loss;  // forward + mean cross-entropy on the fixed batch
  std::vector<NamedTensor> params;
  double items = 0;  // tokens or samples per step
  double flops_per_item = 0;
};

std::string run(std::string_view model, std::string_view precision, int steps, double peak) {
  manual_seed(0);
  Generator gen(1);
  std::shared_ptr<Module> owner;
  Workload w;
  if (model == "gpt") {
    const GPTConfig cfg{.vocab_size = 50304, .n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 1024};
    auto gpt = std::make_shared<GPT>(cfg);
    gpt->to(cuda(0));
    const int64_t batch = 8;
    const Tensor idx = (rand({batch, 1024}, {}, &gen) * 50304.0).to(DType::kI64).to(cuda(0));
    const Tensor tgt = (rand({batch, 1024}, {}, &gen) * 50304.0).to(DType::kI64).to(cuda(0));
    w.loss = [gpt, idx, tgt] { return gpt->forward(idx, tgt).loss; };
    w.items = static_cast<double>(batch * 1024);
    // 6 per parameter per token (forward and backward) plus the attention scores, as the PyTorch side.
    const double n = static_cast<double>(gpt->num_parameters() - 1024 * 768);
    w.flops_per_item = 6 * n + 12.0 * 12 * 768 * 1024;
    owner = gpt;
  } else {
    auto cnn = std::make_shared<CNN>();
    cnn->to(cuda(0));
    const int64_t batch = 512;
    const Tensor x = randn({batch, 1, 28, 28}, {}, &gen).to(cuda(0));
    const Tensor y = (rand({batch}, {}, &gen) * 10.0).to(DType::kI64).to(cuda(0));
    w.loss = [cnn, x, y] { return cross_entropy(cnn->forward(x), y); };
    w.items = static_cast<double>(batch);
    const double conv = 2.0 * (26 * 26 * 32 * 9 + 11 * 11 * 64 * 32 * 9), fc = 2.0 * (1600 * 128 + 128 * 10);
    w.flops_per_item = 3 * (conv + fc);
    owner = cnn;
  }
  AdamW opt(owner->named_parameters(), AdamWOptions{.lr = 1e-4});
  amp::GradScaler scaler(
      amp::GradScalerOptions{.state = precision == "fp16" ? amp::ScalerState::kEnabled : amp::ScalerState::kDisabled});
  const bool autocast = precision != "fp32";
  const DType low = precision == "fp16" ? DType::kF16 : DType::kBF16;
  std::vector<double> times;
  const int warmup = 5;
  cuda_reset_peak_memory_stats(0);
  for (int i = 0; i < warmup + steps; ++i) {
    cuda_synchronize(0);
    const auto t0 = Clock::now();
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard guard({.device = DeviceType::kCUDA,
                                .dtype = low,
                                .state = autocast ? amp::AutocastState::kEnabled : amp::AutocastState::kDisabled});
      loss = w.loss();
    }
    scaler.scale(loss).backward();
    scaler.enqueue_step(opt);
    scaler.update();
    cuda_synchronize(0);
    if (i >= warmup) times.push_back(seconds_since(t0));
  }
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  const double s = times[times.size() / 2];
  const double rate = w.items / s;
  const double gib = static_cast<double>(cuda_memory_stats(0).peak_allocated_bytes) / (1u << 30);
  char line[256];
  std::snprintf(line, sizeof(line), "mantissa %s %s ms=%.3f items_per_s=%.1f mfu=%.4f peak_gib=%.3f",
                std::string(model).c_str(), std::string(precision).c_str(), s * 1e3, rate,
                rate * w.flops_per_item / (peak * 1e12), gib);
  return line;
}

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= s.size();) {
    const size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.emplace_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace
}  // namespace mantissa

int main(int argc, char** argv) {
  using namespace mantissa;
  std::string models = "gpt,cnn", precisions = "fp32,fp16,bf16";
  int steps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--models=")) {
      models = arg.substr(9);
    } else if (arg.starts_with("--precisions=")) {
      precisions = arg.substr(13);
    } else if (arg.starts_with("--steps=")) {
      steps = std::atoi(argv[i] + 8);
    } else {
      std::fprintf(stderr, "gpu_step_bench: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (cuda_device_count() == 0) {
    std::printf("gpu_step_bench: skipped: no CUDA device: %s\n", cuda_unavailable_reason().c_str());
    return 0;
  }
  try {
    const double peak = bf16_peak_tflops();
    std::printf("mantissa bf16_peak_tflops=%.1f\n", peak);
    for (const std::string& m : split(models)) {
      for (const std::string& p : split(precisions)) {
        std::printf("%s\n", run(m, p, std::max(steps, 1), peak).c_str());
        std::fflush(stdout);
        cuda_empty_cache();
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_step_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

// Issue 7: an MLP and a small GPT trained a few hundred steps on the GPU in fp16 (autocast + GradScaler,
// the sync-free enqueue_step) and bf16 (autocast) follow the CPU run of the same precision from the same
// initial weights on the same batches. Bit equality is not expected (cuBLASLt and the CPU GEMM sum in
// different orders, and the differences grow through training), so the curves are compared as means
// over windows of 25 steps. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "framework/cuda/device.h"
#include "framework/random.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "optim/adam.h"
#include "optim/precision_ladder.h"
#include "tests/support/cuda_skip.h"

namespace mantissa {
namespace {

constexpr int kWindow = 25;

struct Batch {
  Tensor x, y;
};

// Runs `steps` AdamW steps of `loss_of(model, batch)` on `device` in `precision` and returns the losses. Under a
// ladder without masters the model's weights become bf16 first.
std::vector<double> train(Module& model, Device device, DType precision, const std::vector<Batch>& batches, int steps,
                          const std::function<Tensor(const Batch&)>& loss_of, const PrecisionLadder& ladder = {}) {
  model.to(device);
  if (ladder.master_weights == MasterWeights::kNone) model.to(DType::kBF16);
  AdamW opt(model.named_parameters(), AdamWOptions{.lr = 3e-3}, ladder);
  amp::GradScaler scaler(amp::scaler_defaults_for(precision));
  std::vector<Batch> on_device;
  for (const Batch& b : batches) on_device.push_back({b.x.to(device), b.y.to(device)});
  std::vector<Tensor> losses;  // read at the end: no host synchronization inside the loop
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    Tensor loss;
    {
      // The CPU run applies the CUDA categories (policy_device), so both runs cast the same ops.
      amp::AutocastGuard guard({.device = device.type, .dtype = precision, .policy_device = DeviceType::kCUDA});
      loss = loss_of(on_device[static_cast<size_t>(i) % on_device.size()]);
    }
    scaler.scale(loss).backward();
    scaler.enqueue_step(opt);
    scaler.update();
    losses.push_back(loss.detach());
  }
  std::vector<double> out;
  for (const Tensor& l : losses) out.push_back(l.item());
  return out;
}

std::vector<double> window_means(const std::vector<double>& v) {
  std::vector<double> out;
  for (size_t i = 0; i + kWindow <= v.size(); i += kWindow) {
    double s = 0;
    for (size_t j = i; j < i + kWindow; ++j) s += v[j];
    out.push_back(s / kWindow);
  }
  return out;
}

// Both runs learn (the last window under half the first) and every window's mean on the GPU is within 5%
// (+0.02 absolute, for windows near zero) of the CPU's: rounding differences move single steps, not
// the curve.
void expect_curves_follow(const std::vector<double>& cpu, const std::vector<double>& gpu, const char* what) {
  const std::vector<double> c = window_means(cpu), g = window_means(gpu);
  ASSERT_EQ(c.size(), g.size());
  ASSERT_GE(c.size(), 4u);
  EXPECT_LT(c.back(), 0.5 * c.front()) << what << ": the CPU run did not learn";
  EXPECT_LT(g.back(), 0.5 * g.front()) << what << ": the GPU run did not learn";
  for (size_t w = 0; w < c.size(); ++w) {
    EXPECT_TRUE(std::isfinite(g[w])) << what << " window " << w;
    EXPECT_NEAR(g[w], c[w], 0.05 * c[w] + 0.02) << what << ": window " << w << " (steps " << w * kWindow << "..)";
  }
}

class GpuTraining : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { MT_SKIP_WITHOUT_CUDA(); }
};

// A teacher-labelled task: y = argmax(x W) for a fixed random W, 16 batches of 128 cycled.
std::vector<Batch> teacher_batches() {
  Generator gen(5);
  const Tensor teacher = randn({64, 10}, {}, &gen);
  std::vector<Batch> batches;
  for (int b = 0; b < 16; ++b) {
    const Tensor x = randn({128, 64}, {}, &gen);
    batches.push_back({x, argmax(mm(x, teacher), 1)});
  }
  return batches;
}

// The MLP trained 300 steps on the CPU and on the GPU from the same initial weights; their curves must agree.
void expect_mlp_curves_follow(DType precision, const PrecisionLadder& ladder, const std::string& what) {
  const std::vector<Batch> batches = teacher_batches();
  auto make = [] {
    Generator init(11);
    return std::make_unique<MLP>(64, std::vector<int64_t>{256, 256}, 10, MLPOptions{.generator = &init});
  };
  auto cpu_model = make(), gpu_model = make();
  auto loss_cpu = [&](const Batch& b) { return cross_entropy(cpu_model->forward(b.x), b.y); };
  auto loss_gpu = [&](const Batch& b) { return cross_entropy(gpu_model->forward(b.x), b.y); };
  const auto cpu = train(*cpu_model, kCPU, precision, batches, 300, loss_cpu, ladder);
  const auto gpu = train(*gpu_model, cuda(0), precision, batches, 300, loss_gpu, ladder);
  expect_curves_follow(cpu, gpu, what.c_str());
}

TEST_P(GpuTraining, MlpFollowsTheCpuCurve) {
  expect_mlp_curves_follow(GetParam(), {}, std::string(dtype_name(GetParam())));
}

TEST_P(GpuTraining, GptFollowsTheCpuCurve) {
  // Sequences of a fixed random permutation walk over 32 tokens: next = perm[current], learnable exactly.
  Generator gen(6);
  std::vector<int64_t> perm(32);
  for (int64_t i = 0; i < 32; ++i) perm[static_cast<size_t>(i)] = (i * 7 + 3) % 32;
  std::vector<Batch> batches;
  for (int b = 0; b < 8; ++b) {
    std::vector<int64_t> seq(8 * 33);
    for (size_t r = 0; r < 8; ++r) {
      int64_t t = static_cast<int64_t>(gen.next_u32() % 32);
      for (size_t j = 0; j < 33; ++j) seq[r * 33 + j] = t, t = perm[static_cast<size_t>(t)];
    }
    const Tensor all = from_vector<int64_t>(seq, {8, 33});
    batches.push_back({all.slice(1, 0, 32).contiguous(), all.slice(1, 1, 33).contiguous()});
  }
  const GPTConfig cfg{.vocab_size = 32, .n_layer = 2, .n_head = 2, .n_embd = 64, .block_size = 32};
  auto make = [&] {
    Generator init(12);
    return std::make_unique<GPT>(cfg, GPTOptions{.generator = &init});
  };
  auto cpu_model = make(), gpu_model = make();
  auto loss_cpu = [&](const Batch& b) { return cpu_model->forward(b.x, b.y).loss; };
  auto loss_gpu = [&](const Batch& b) { return gpu_model->forward(b.x, b.y).loss; };
  const auto cpu = train(*cpu_model, kCPU, GetParam(), batches, 200, loss_cpu);
  const auto gpu = train(*gpu_model, cuda(0), GetParam(), batches, 200, loss_gpu);
  expect_curves_follow(cpu, gpu, dtype_name(GetParam()).data());
}

INSTANTIATE_TEST_SUITE_P(Precisions, GpuTraining, ::testing::Values(DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Issue 36: the precision ladder's CUDA kernel (optim/cuda/ladder.cu) inside whole training steps, where its unit
// test (tests/cuda/ladder_cuda_test.cc) steps it alone: bf16 weights without masters under bf16 autocast
// (stochastic rounding with 8-bit moments; Kahan with bf16 moments), and fp32 masters with 8-bit moments under fp16
// with the GradScaler's sync-free enqueue_step (the kernel reads inv_scale and found_inf on the device). The suite's
// name keeps it in device_check.sh's curves filter (*GpuTraining*).
struct LadderRun {
  const char* name;
  DType precision;
  PrecisionLadder ladder;
};

class GpuTrainingLadder : public ::testing::TestWithParam<LadderRun> {
 protected:
  void SetUp() override { MT_SKIP_WITHOUT_CUDA(); }
};

TEST_P(GpuTrainingLadder, MlpFollowsTheCpuCurve) {
  const LadderRun& run = GetParam();
  expect_mlp_curves_follow(run.precision, run.ladder,
                           run.ladder.str() + " under " + std::string(dtype_name(run.precision)));
}

INSTANTIATE_TEST_SUITE_P(Rungs, GpuTrainingLadder,
                         ::testing::Values(LadderRun{"StochasticBf16Weights8bitState",
                                                     DType::kBF16,
                                                     {.master_weights = MasterWeights::kNone,
                                                      .update_rounding = UpdateRounding::kStochastic,
                                                      .optimizer_state = StateStorage::k8bit,
                                                      .seed = 3}},
                                           LadderRun{"KahanBf16WeightsBf16State",
                                                     DType::kBF16,
                                                     {.master_weights = MasterWeights::kNone,
                                                      .update_rounding = UpdateRounding::kKahan,
                                                      .optimizer_state = StateStorage::kBf16}},
                                           LadderRun{"Fp32Masters8bitStateF16Scaler",
                                                     DType::kF16,
                                                     {.optimizer_state = StateStorage::k8bit}}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mantissa

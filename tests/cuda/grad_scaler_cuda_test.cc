// The GradScaler on CUDA against the same run on the CPU: PyTorch's update rule, unscale_ / skip / backoff /
// growth sequences with SGD, Adam and AdamW (f32 parameters bit for bit, the scale and trackers equal), and
// the scaler's part of a training step (check, fused step, scale update) captured in a CUDA graph on a
// non-default stream: capture fails if anything reads found_inf (or anything else) on the host.
// Needs CUDA tensors (Tensor::to, device zeros/copy_/fill_/item); skipped without a device.
#include <gtest/gtest.h>

#include "framework/cuda/device.h"
#include "tests/support/cuda_skip.h"

#ifdef MANTISSA_WITH_CUDA
#include <cstring>
#include <cuda_runtime_api.h>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "framework/random.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace mantissa::amp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<NamedTensor> make_params(Device device) {
  Generator gen(3);
  std::vector<NamedTensor> params;
  int i = 0;
  for (Shape shape : {Shape{64, 33}, Shape{33}, Shape{1000, 70}, Shape{7}}) {
    Tensor p = randn(shape, {}, &gen);
    if (device.is_cuda()) p = p.to(device);
    params.push_back({"p" + std::to_string(i++), p.set_requires_grad(true)});
  }
  return params;
}

// Iteration `it`'s grads (scaled by `scale`, as a scaled backward leaves them), with an inf planted when
// `overflow`; the same values on both devices.
void set_grads(std::vector<NamedTensor>& params, int it, double scale, bool overflow) {
  Generator gen(50 + it);
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = randn(params[i].tensor.shape(), {}, &gen);
    float* v = g.data<float>();
    for (int64_t j = 0; j < g.numel(); ++j) v[j] = static_cast<float>(v[j] * scale);
    if (overflow && i == 2) v[12345] = kInf;
    const Device device = params[i].tensor.device();
    if (!params[i].tensor.grad().defined()) {
      params[i].tensor.set_grad(device.is_cuda() ? g.to(device) : g);
    } else {
      copy_(params[i].tensor.grad(), g);  // in place: the addresses a captured graph reads stay valid
    }
  }
}

void expect_same_params(const std::vector<NamedTensor>& cpu, const std::vector<NamedTensor>& gpu,
                        const std::string& what) {
  for (size_t i = 0; i < cpu.size(); ++i) {
    const Tensor back = gpu[i].tensor.detach().to(kCPU);
    EXPECT_EQ(std::memcmp(cpu[i].tensor.data_ptr(), back.data_ptr(), cpu[i].tensor.nbytes()), 0)
        << what << ": " << cpu[i].name << " differs between CPU and CUDA";
  }
}

using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<NamedTensor>)>;

const std::vector<std::pair<std::string, Factory>>& factories() {
  static const std::vector<std::pair<std::string, Factory>> f{
      {"SGD",
       [](auto p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true}); }},
      {"Adam", [](auto p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 1e-3, .weight_decay = 1e-2}); }},
      {"AdamW", [](auto p) { return std::make_unique<AdamW>(p, AdamWOptions{.lr = 1e-3, .amsgrad = true}); }},
  };
  return f;
}

// unscale (every other iteration, as a clipping loop would), skip, backoff, growth: CPU and CUDA runs
// take the same decisions and end with the same bits.
TEST(CudaGradScaler, SequencesMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  const bool overflows[] = {false, false, true, false, true, true, false, false, false, false};
  // Both hysteresis refill rules: they part at iteration 4 (an overflow after a clean step that is no growth).
  for (const auto& [name, make] : factories())
    for (HysteresisRefill refill : {HysteresisRefill::kOnCleanStep, HysteresisRefill::kOnGrowth}) {
      auto pc = make_params(kCPU), pg = make_params(cuda(0));
      auto oc = make(pc), og = make(pg);
      const GradScalerOptions o{
          .init_scale = 1024.0, .growth_interval = 2, .hysteresis = 2, .hysteresis_refill = refill};
      GradScaler sc(o), sg(o);
      for (int it = 0; it < 10; ++it) {
        const std::string at =
            name + " refill " + std::to_string(static_cast<int>(refill)) + " iteration " + std::to_string(it);
        set_grads(pc, it, sc.get_scale(), overflows[it]);
        set_grads(pg, it, sg.get_scale(), overflows[it]);
        if (it % 2 == 1) {
          sc.unscale_(*oc);
          sg.unscale_(*og);
          for (size_t i = 0; i < pc.size(); ++i) {  // the unscaled grads themselves, inf and nan included
            const Tensor back = pg[i].tensor.grad().to(kCPU);
            EXPECT_EQ(std::memcmp(pc[i].tensor.grad().data_ptr(), back.data_ptr(), back.nbytes()), 0)
                << at << ": unscaled grad of " << pc[i].name;
          }
        }
        EXPECT_EQ(sc.step(*oc), sg.step(*og)) << at;
        sc.update();
        sg.update();
        ASSERT_EQ(sc.get_scale(), sg.get_scale()) << at;
        EXPECT_EQ(sc.growth_tracker(), sg.growth_tracker()) << at;
        EXPECT_EQ(sc.stats().hysteresis_left, sg.stats().hysteresis_left) << at;
        expect_same_params(pc, pg, at);
      }
      const auto a = sc.stats(), b = sg.stats();
      EXPECT_EQ(a.steps, b.steps) << name;
      EXPECT_EQ(a.skipped_steps, b.skipped_steps) << name;
      EXPECT_EQ(a.last_overflow_step, b.last_overflow_step) << name;
      EXPECT_EQ(sc.state_dict(), sg.state_dict()) << name;
    }
}

// PyTorch's _amp_update_scale_ case on the GPU: growth 2, backoff 0.25, interval 2, scale 4.
TEST(CudaGradScaler, UpdateRule) {
  MT_SKIP_WITHOUT_CUDA();
  GradScaler scaler({.init_scale = 4.0, .growth_factor = 2.0, .backoff_factor = 0.25, .growth_interval = 2});
  auto iteration = [&](float grad) {
    Tensor w = zeros({1}).to(cuda(0)).set_requires_grad(true);
    SGD opt({{"w", w}}, {.lr = 0.1});
    w.set_grad(full({1}, grad).to(cuda(0)));
    scaler.enqueue_step(opt);
    scaler.update();
  };
  iteration(1.0f);
  EXPECT_EQ(scaler.get_scale(), 4.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  iteration(1.0f);
  EXPECT_EQ(scaler.get_scale(), 8.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  iteration(kInf);
  EXPECT_EQ(scaler.get_scale(), 2.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

// The check, the fused Adam step and the scale update, captured once and replayed: replays with clean
// and overflowing grads equal the CPU run. Capture (global mode) fails on any host synchronization.
TEST(CudaGradScaler, StepIsCapturableInACudaGraph) {
  MT_SKIP_WITHOUT_CUDA();
  auto pc = make_params(kCPU), pg = make_params(cuda(0));
  const Factory& make = factories()[1].second;
  auto oc = make(pc), og = make(pg);
  const GradScalerOptions o{.init_scale = 512.0, .growth_interval = 2};
  GradScaler sc(o), sg(o);

  MT_CUDA_CHECK(cudaDeviceSynchronize());  // the parameters' copies ran on the default stream
  cudaStream_t stream = nullptr;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    gpu::StreamGuard on_stream(0, stream);
    // Iteration 0, eager: moves the scaler to the GPU and creates the optimizer state and the flags.
    const double scale0 = sc.get_scale();
    set_grads(pc, 0, scale0, false);
    set_grads(pg, 0, scale0, false);
    sc.step(*oc);
    sc.update();
    sg.enqueue_step(*og);
    sg.update();
    MT_CUDA_CHECK(cudaStreamSynchronize(stream));
    expect_same_params(pc, pg, "eager iteration");

    cudaGraph_t graph = nullptr;
    MT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    std::string failure;
    try {
      sg.enqueue_step(*og);
      sg.update();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    ASSERT_TRUE(failure.empty()) << "the step threw during capture: " << failure;
    ASSERT_EQ(end, cudaSuccess) << "capture broken (a host synchronization in the step?): " << cudaGetErrorString(end);
    cudaGraphExec_t exec = nullptr;
    MT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

    const bool overflows[] = {false, true, false, false, true, false};
    for (int it = 1; it <= 6; ++it) {
      // The host knows the scale only by asking; the CPU run's scale is the same (checked below).
      const double scale = sc.get_scale();
      set_grads(pc, it, scale, overflows[it - 1]);
      set_grads(pg, it, scale, overflows[it - 1]);
      sc.step(*oc);
      sc.update();
      MT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      MT_CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::string at = "replay " + std::to_string(it);
      ASSERT_EQ(sc.get_scale(), sg.get_scale()) << at;
      expect_same_params(pc, pg, at);
    }
    EXPECT_EQ(sc.stats().skipped_steps, sg.stats().skipped_steps);
    MT_CUDA_CHECK(cudaGraphExecDestroy(exec));
    MT_CUDA_CHECK(cudaGraphDestroy(graph));
  }
  MT_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace mantissa::amp

#else  // !MANTISSA_WITH_CUDA

TEST(CudaGradScaler, NeedCuda) { GTEST_SKIP() << "built without CUDA (-DMANTISSA_CUDA=ON builds these tests)"; }

#endif

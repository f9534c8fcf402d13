// The precision ladder's CUDA kernel (optim/cuda/ladder.cu) against the CPU's (optim/cpu/ladder_kernels.cc): every
// optimizer under the rungs that store differently (bf16 weights rounded each way, bf16 and 8-bit state, fp32
// masters with 8-bit state and a working copy), four steps with the same grads, the same bits in weights, state,
// absmax and compensation. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "optim/adam.h"
#include "optim/lion.h"
#include "optim/sgd.h"
#include "tests/support/cuda_skip.h"

namespace mantissa {
namespace {

std::unique_ptr<Optimizer> make(int which, std::vector<NamedTensor> params, const PrecisionLadder& ladder) {
  switch (which) {
    case 0: return std::make_unique<Adam>(std::move(params), AdamOptions{.lr = 1e-2, .weight_decay = 1e-3}, ladder);
    case 1:
      return std::make_unique<AdamW>(std::move(params), AdamWOptions{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true},
                                     ladder);
    case 2:
      return std::make_unique<SGD>(std::move(params), SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true},
                                   ladder);
    default: return std::make_unique<Lion>(std::move(params), LionOptions{.lr = 1e-3, .weight_decay = 0.1}, ladder);
  }
}

bool same_bits(const Tensor& cpu_tensor, const Tensor& gpu_tensor) {
  const Tensor back = gpu_tensor.to(kCPU);
  return cpu_tensor.dtype() == back.dtype() && cpu_tensor.shape() == back.shape() &&
         std::memcmp(cpu_tensor.data_ptr(), back.data_ptr(), cpu_tensor.nbytes()) == 0;
}

TEST(CudaLadder, EveryOptimizerAndRungEqualsTheCpu) {
  MT_SKIP_WITHOUT_CUDA();
  const PrecisionLadder rungs[] = {
      {.master_weights = MasterWeights::kNone, .update_rounding = UpdateRounding::kNearest},
      {.master_weights = MasterWeights::kNone,
       .update_rounding = UpdateRounding::kStochastic,
       .optimizer_state = StateStorage::k8bit,
       .seed = 9},
      {.master_weights = MasterWeights::kNone,
       .update_rounding = UpdateRounding::kKahan,
       .optimizer_state = StateStorage::kBf16},
      {.optimizer_state = StateStorage::k8bit},
  };
  for (int which = 0; which < 4; ++which) {
    for (const PrecisionLadder& ladder : rungs) {
      const DType dtype = ladder.master_weights == MasterWeights::kNone ? DType::kBF16 : DType::kF32;
      Generator gen(3);
      Tensor a = (randn({5000}, {}, &gen) * 0.5).to(dtype);  // two whole 2048-blocks and a partial one
      Tensor b = a.to(cuda(0));
      a.set_requires_grad(true);
      b.set_requires_grad(true);
      auto on_cpu = make(which, {{"w", a}}, ladder);
      auto on_gpu = make(which, {{"w", b}}, ladder);
      if (dtype == DType::kF32) {
        on_cpu->enable_working_copies(DType::kBF16);
        on_gpu->enable_working_copies(DType::kBF16);
      }
      SCOPED_TRACE(std::string(on_cpu->type_name()) + " under " + ladder.str());
      for (int s = 0; s < 4; ++s) {
        const Tensor g = (randn({5000}, {}, &gen) * 0.1).to(dtype);
        a.set_grad(g);
        b.set_grad(g.to(cuda(0)));
        on_cpu->step();
        on_gpu->step();
      }
      EXPECT_TRUE(same_bits(a.detach(), b.detach())) << "weights";
      for (const auto& [name, t] : *on_cpu->state("w")) {
        EXPECT_TRUE(same_bits(t, on_gpu->state("w")->at(name))) << name;
      }
      if (dtype == DType::kF32) {
        EXPECT_TRUE(same_bits(on_cpu->working_copy("w"), on_gpu->working_copy("w")));
      }
    }
  }
}

}  // namespace
}  // namespace mantissa

// GradScaler::enqueue_step on the CPU: the same updates and the same skips as step(), only without the
// answer (on CUDA it is the step that never waits for the GPU; tests/cuda/grad_scaler_cuda_test.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "amp/grad_scaler.h"
#include "framework/random.h"
#include "optim/adam.h"

namespace mantissa::amp {
namespace {

TEST(GradScalerEnqueue, EqualsStepOnTheCpu) {
  Generator gen_a(1), gen_b(1);
  Tensor a = randn({40}, {}, &gen_a).set_requires_grad(true), b = randn({40}, {}, &gen_b).set_requires_grad(true);
  Adam opt_a({{"w", a}}, {.lr = 1e-2}), opt_b({{"w", b}}, {.lr = 1e-2});
  const GradScalerOptions o{.init_scale = 256.0, .growth_interval = 2};
  GradScaler sa(o), sb(o);
  const bool overflows[] = {false, true, false, false, false, true};
  for (int it = 0; it < 6; ++it) {
    Generator gen(10 + it);
    Tensor g = randn({40}, {}, &gen);
    if (overflows[it]) g.data<float>()[7] = std::numeric_limits<float>::infinity();
    a.set_grad(g.clone());
    b.set_grad(g.clone());
    EXPECT_EQ(sa.step(opt_a), !overflows[it]) << "iteration " << it;
    sb.enqueue_step(opt_b);
    sa.update();
    sb.update();
    EXPECT_EQ(sa.get_scale(), sb.get_scale()) << "iteration " << it;
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << "iteration " << it;
  }
  EXPECT_EQ(sa.stats().skipped_steps, 2);
  EXPECT_EQ(sb.stats().skipped_steps, 2);
  // The misuse errors are the same too: a second step before update() throws.
  b.set_grad(zeros({40}));
  sb.enqueue_step(opt_b);
  EXPECT_THROW(sb.enqueue_step(opt_b), Error);
}

}  // namespace
}  // namespace mantissa::amp

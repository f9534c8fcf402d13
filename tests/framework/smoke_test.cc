#include <gtest/gtest.h>

#include "framework/autograd.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

TEST(Smoke, AddMulBackward) {
  Tensor a = from_vector<float>({1, 2, 3}).set_requires_grad(true);
  Tensor b = from_vector<float>({4, 5, 6}).set_requires_grad(true);
  Tensor loss = sum(a * b + a);
  loss.backward();
  EXPECT_FLOAT_EQ(loss.item(), 1 * 4 + 2 * 5 + 3 * 6 + 6);
  EXPECT_FLOAT_EQ(a.grad().data<float>()[1], 6.0f);
  EXPECT_FLOAT_EQ(b.grad().data<float>()[2], 3.0f);
}

}  // namespace
}  // namespace mantissa

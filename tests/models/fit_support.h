// Shared by the model tests: Adam on one fixed batch with cross-entropy, checking on the first step that
// every parameter received a gradient. Returns the first and the last loss.
#pragma once

#include <gtest/gtest.h>

#include <functional>

#include "framework/module.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"

namespace mantissa::testing {

struct FitLosses {
  double first = 0.0;
  double last = 0.0;
};

inline FitLosses fit_fixed_batch(const Module& model, const std::function<Tensor(const Tensor&)>& forward,
                                 const Tensor& x, const Tensor& y, double lr, int steps) {
  Adam opt(model.named_parameters(), {.lr = lr});
  FitLosses out;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(forward(x), y);
    loss.backward();
    if (step == 0) {
      out.first = loss.item();
      for (const auto& [name, p] : model.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
    }
    out.last = loss.item();
    opt.step();
  }
  return out;
}

}  // namespace mantissa::testing

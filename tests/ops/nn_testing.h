// Test helpers for the nn ops (softmax, losses, embedding, dropout, shape ops): seeded random tensors,
// elementwise closeness with a report of the worst element, a central-difference gradcheck in f64, and
// a runner for the PyTorch golden groups in tests/golden/ops.h5. Header-only; if a suite-wide gradcheck
// harness lands in tests/support/, these tests can switch to it.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "tests/support/golden.h"
#include "tests/support/gradcheck.h"

namespace mantissa::testing {

// Values uniform in [lo, hi) from a fixed seed, as `dtype` (rounded from f64).
inline Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::kF64, double lo = -2.0,
                            double hi = 2.0) {
  Generator gen(seed);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = lo + (hi - lo) * gen.uniform_double();
  return from_vector<double>(v, shape).to(dtype);
}

// The tensor's values as doubles in row-major order (any dtype, any strides).
inline std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(DType::kF64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// |actual - expected| <= atol + rtol * |expected| everywhere (nan matches nan), shapes equal.
inline ::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " != expected "
                                         << shape_str(expected.shape());
  }
  const std::vector<double> a = values(actual), e = values(expected);
  double worst = 0;
  size_t worst_i = 0, bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(e[i]) && std::isnan(a[i])) continue;
    if (std::isinf(e[i]) && a[i] == e[i]) continue;
    const double err = std::abs(a[i] - e[i]);
    const double excess = err - (atol + rtol * std::abs(e[i]));
    if (!(excess <= 0)) {
      ++bad;
      if (bad == 1 || excess > worst) {
        worst = excess;
        worst_i = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.size() << " elements differ; worst at flat index "
                                       << worst_i << ": " << a[worst_i] << " vs expected " << e[worst_i] << " (rtol "
                                       << rtol << ", atol " << atol << ")";
}

// Gradchecks use the project's one harness, testing::gradcheck (tests/support/gradcheck.h).
using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs `op` on a golden group's inputs (converted to `dtype`), backpropagates its grad_output and
// checks the output and every input gradient against PyTorch's f64 values. `n_inputs` differentiable
// inputs are read (input_0 ...). Golden losses are stored as shape [1]; ours are 0-d: compared by value.
inline void check_golden(const std::string& group, int n_inputs, DType dtype, double rtol, double atol,
                         const std::function<Tensor(const std::vector<Tensor>&)>& op) {
  SCOPED_TRACE(group + " in " + std::string(dtype_name(dtype)));
  GoldenFile file("ops.h5");
  std::vector<Tensor> inputs;
  for (int i = 0; i < n_inputs; ++i) {
    inputs.push_back(file.tensor("/" + group + "/input_" + std::to_string(i), dtype).set_requires_grad(true));
  }
  Tensor out = op(inputs);
  const Tensor expected = file.tensor("/" + group + "/output").reshape(out.shape());
  EXPECT_TRUE(all_close(out, expected, rtol, atol)) << "output";
  out.backward(file.tensor("/" + group + "/grad_output", dtype).reshape(out.shape()));
  for (int i = 0; i < n_inputs; ++i) {
    ASSERT_TRUE(inputs[i].grad().defined()) << "no gradient for input " << i;
    EXPECT_EQ(inputs[i].grad().dtype(), dtype);
    EXPECT_TRUE(all_close(inputs[i].grad(), file.tensor("/" + group + "/grad_input_" + std::to_string(i)), rtol, atol))
        << "grad_input_" << i;
  }
}

// The message of the mantissa::Error that `f` throws ("" when it throws none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace mantissa::testing

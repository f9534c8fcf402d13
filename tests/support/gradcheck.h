// The one gradcheck harness: compares an op's analytic gradients (a vector-Jacobian product with a random
// f64 grad_output) against central differences in f64, for contiguous and non-contiguous inputs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "framework/tensor.h"

namespace mantissa::testing {

// How the harness lays out each differentiated input before calling the function. The values are the
// same in every layout; only the memory behind them changes.
enum class InputLayout {
  kContiguous,  // a fresh row-major tensor
  kTransposed,  // a transpose(-1, -2) view of a buffer stored with the last two dims swapped
  kStrided,     // every dim taken with step 2 from a buffer twice as large, at a non-zero offset
};

struct GradcheckOptions {
  // Central differences (f(x+eps) - f(x-eps)) / 2eps: the truncation error is O(eps^2 f''') ~ 1e-12 and the
  // rounding error about 1e-16 |f| / eps ~ 1e-10 |f|, where f = sum(out * grad_output) is at most ~10 for
  // the small inputs the tests use. atol 1e-7 leaves two orders of magnitude above that noise, and rtol
  // 1e-5 covers gradients of larger magnitude, while a wrong formula is off by O(1).
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  // Every layout is checked in turn; non-contiguous inputs catch kernels that assume a flat layout.
  std::vector<InputLayout> layouts = {InputLayout::kContiguous, InputLayout::kTransposed, InputLayout::kStrided};
  // Which inputs to differentiate; empty means every floating input. Others are passed through unchanged.
  std::vector<bool> differentiate;
  uint64_t seed = 1234;  // for grad_output
  int max_reported = 5;  // failing elements named in the message
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs `fn` on `inputs` (differentiated ones must be f64) and checks every element of every differentiated
// input's gradient. On failure the message names the input, its layout, the element and both values.
::testing::AssertionResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& options = {});

// Second derivatives (PyTorch's gradgradcheck): with y = fn(inputs), a random grad_output v and a random
// weight u_k per differentiated input, the analytic gradient of s = sum_k <grad(y, x_k; v, create_graph), u_k>
// with respect to every differentiated input and to v is checked against central differences of s, each
// evaluation of s being a first-order grad(). The gradient with respect to v checks that the create_graph
// gradients carry history through the incoming gradient too, which a chain of ops relies on. The same
// options and layouts as gradcheck; failures name the input (or "grad_output"), layout and element.
::testing::AssertionResult gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                                         const GradcheckOptions& options = {});

// Random f64 inputs for gradchecks, deterministic in `seed`.
struct RandomInputOptions {
  double low = -2.0, high = 2.0;  // uniform in [low, high)
  // Values closer than this to zero are pushed away from it (relu, abs, clamp, and log's domain). With the
  // default 0 nothing is moved.
  double min_abs = 0.0;
};
Tensor random_input(const Shape& shape, uint64_t seed, RandomInputOptions options = {});

// Values of an f64 tensor in row-major order (any layout).
std::vector<double> values_f64(const Tensor& t);

}  // namespace mantissa::testing

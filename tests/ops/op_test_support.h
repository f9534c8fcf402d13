// Shared helpers for the conv, pool and norm tests: seeded random tensors, element access in f64, a
// central-difference gradient check in f64, and 16-bit ulp distance. (Replace the gradcheck by the
// project-wide harness when it lands.)
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "tests/support/gradcheck.h"

namespace mantissa::testing {

// Standard-normal values (scaled) from a seeded Generator, as a contiguous tensor of `dtype`.
inline Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::kF64, double scale = 1.0) {
  Generator gen(seed);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& e : v) e = scale * gen.normal();
  return from_vector<double>(v, shape).to(dtype);
}

// All values of t (any dtype, any strides) in f64, in row-major order of its shape.
inline std::vector<double> values(const Tensor& t) {
  const Tensor c = t.detach().to(DType::kF64).contiguous();
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

// max |a - b| / max(max |b|, tiny): an error relative to the reference's scale.
inline double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double err = 0, scale = 1e-300;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / scale;
}

// The project's one gradcheck harness (tests/support/gradcheck.h) on contiguous f64 inputs, with the
// tolerance these tests were written for: |analytic - numeric| <= tol * max(1, |numeric|).
inline void expect_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                             const std::vector<Tensor>& leaves, double tol = 1e-7) {
  EXPECT_TRUE(
      testing::gradcheck(f, leaves, {.atol = tol, .rtol = tol, .layouts = {testing::InputLayout::kContiguous}}));
}

// Distance in units in the last place between two 16-bit values of one type (sign-magnitude order).
inline int64_t ulp_distance_16(uint16_t a, uint16_t b) {
  auto ordered = [](uint16_t v) {
    return (v & 0x8000u) ? -static_cast<int64_t>(v & 0x7fffu) : static_cast<int64_t>(v);
  };
  return std::abs(ordered(a) - ordered(b));
}

// Largest ulp distance between a 16-bit tensor and an f32 tensor rounded once to that type.
inline int64_t max_ulps_vs_rounded(const Tensor& low, const Tensor& f32) {
  const Tensor rounded = f32.detach().to(low.dtype()).contiguous();
  const Tensor l = low.contiguous();
  int64_t worst = 0;
  const auto* a = static_cast<const uint16_t*>(l.data_ptr());
  const auto* b = static_cast<const uint16_t*>(rounded.data_ptr());
  for (int64_t i = 0; i < l.numel(); ++i) worst = std::max(worst, ulp_distance_16(a[i], b[i]));
  return worst;
}

}  // namespace mantissa::testing

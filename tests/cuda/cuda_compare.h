// Helpers for the CUDA-vs-CPU tests: random CPU inputs, device moves, and comparisons that report the
// worst element: in units in the last place of the tensors' own dtype (elementwise ops that round once)
// or in relative terms (reductions, whose summation order differs between the backends).
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <vector>

#include "framework/cuda/device.h"
#include "framework/generator.h"
#include "framework/half.h"
#include "framework/tensor.h"
#include "tests/support/cuda_skip.h"

#ifdef MANTISSA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mantissa::testing {

// Uniform random values in [low, high) drawn in f64 and rounded to `dtype` (CPU).
inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double low = -2.0, double high = 2.0) {
  Generator gen(seed);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = low + (high - low) * gen.uniform_double();
  return from_vector<double>(v, shape).to(dtype);
}

// The value's position on the number line of `dtype`'s bit patterns (adjacent values differ by 1; +0 and
// -0 coincide), so |order(a) - order(b)| is the distance in ulps. `v` must be a value of that dtype.
inline int64_t ulp_order(double v, DType dtype) {
  int64_t bits = 0, sign_bit = 0;
  switch (dtype) {
    case DType::kF32:
      bits = std::bit_cast<uint32_t>(static_cast<float>(v));
      sign_bit = int64_t{1} << 31;
      break;
    case DType::kF16:
      bits = Half(static_cast<float>(v)).bits;
      sign_bit = 1 << 15;
      break;
    case DType::kBF16:
      bits = BFloat16(static_cast<float>(v)).bits;
      sign_bit = 1 << 15;
      break;
    default: {
      const uint64_t u = std::bit_cast<uint64_t>(v);
      const int64_t mag = static_cast<int64_t>(u & ~(uint64_t{1} << 63));
      return (u >> 63) ? -mag : mag;
    }
  }
  return (bits & sign_bit) ? -(bits & (sign_bit - 1)) : bits;
}

inline std::vector<double> host_values(const Tensor& t) {
  const Tensor c = t.to(kCPU).to(DType::kF64).contiguous();
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

// actual (any device) equals expected (CPU) within `ulps` units in the last place of their dtype;
// NaN must meet NaN, infinities must match exactly.
inline ::testing::AssertionResult within_ulps(const Tensor& expected, const Tensor& actual, int64_t ulps) {
  if (expected.shape() != actual.shape() || expected.dtype() != actual.dtype()) {
    return ::testing::AssertionFailure() << "shape/dtype differ: " << shape_str(expected.shape()) << " "
                                         << dtype_name(expected.dtype()) << " vs " << shape_str(actual.shape()) << " "
                                         << dtype_name(actual.dtype());
  }
  const std::vector<double> e = host_values(expected), a = host_values(actual);
  int64_t worst = -1, worst_at = -1;
  for (size_t i = 0; i < e.size(); ++i) {
    int64_t d;
    if (std::isnan(e[i]) || std::isnan(a[i])) {
      d = std::isnan(e[i]) && std::isnan(a[i]) ? 0 : INT64_MAX;
    } else if (std::isinf(e[i]) || std::isinf(a[i])) {
      d = e[i] == a[i] ? 0 : INT64_MAX;
    } else {
      d = std::abs(ulp_order(e[i], expected.dtype()) - ulp_order(a[i], expected.dtype()));
    }
    if (d > worst) {
      worst = d;
      worst_at = static_cast<int64_t>(i);
    }
  }
  if (worst <= ulps) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << dtype_name(expected.dtype()) << " " << shape_str(expected.shape())
                                       << ": element " << worst_at << " expected " << e[worst_at] << " got "
                                       << a[worst_at] << " (" << worst << " ulps, allowed " << ulps << ")";
}

// Each element within `ulps` units in the last place OR within `atol` absolute: for formulas that cancel
// (gelu's 1 + erf for negative x, tanh's 1 - r^2 near |r| = 1), where two math libraries' few-ulp
// differences in an intermediate become many ulps of a small result but stay small in absolute terms.
inline ::testing::AssertionResult within_ulps_or_abs(const Tensor& expected, const Tensor& actual, int64_t ulps,
                                                     double atol) {
  if (expected.shape() != actual.shape() || expected.dtype() != actual.dtype()) return within_ulps(expected, actual, 0);
  const std::vector<double> e = host_values(expected), a = host_values(actual);
  for (size_t i = 0; i < e.size(); ++i) {
    if (std::isnan(e[i]) || std::isnan(a[i]) || std::isinf(e[i]) || std::isinf(a[i])) {
      if (!(e[i] == a[i] || (std::isnan(e[i]) && std::isnan(a[i])))) {
        return ::testing::AssertionFailure() << "element " << i << " expected " << e[i] << " got " << a[i];
      }
      continue;
    }
    const int64_t d = std::abs(ulp_order(e[i], expected.dtype()) - ulp_order(a[i], expected.dtype()));
    if (d > ulps && std::abs(a[i] - e[i]) > atol) {
      return ::testing::AssertionFailure()
             << dtype_name(expected.dtype()) << " element " << i << " expected " << e[i] << " got " << a[i] << " (" << d
             << " ulps, allowed " << ulps << ", or " << atol << " absolute)";
    }
  }
  return ::testing::AssertionSuccess();
}

// |actual - expected| <= atol + rtol |expected| elementwise; NaN must meet NaN.
inline ::testing::AssertionResult within_rel(const Tensor& expected, const Tensor& actual, double rtol, double atol) {
  if (expected.shape() != actual.shape()) {
    return ::testing::AssertionFailure() << "shapes differ: " << shape_str(expected.shape()) << " vs "
                                         << shape_str(actual.shape());
  }
  const std::vector<double> e = host_values(expected), a = host_values(actual);
  for (size_t i = 0; i < e.size(); ++i) {
    const bool ok =
        (std::isnan(e[i]) && std::isnan(a[i])) || e[i] == a[i] || std::abs(a[i] - e[i]) <= atol + rtol * std::abs(e[i]);
    if (!ok) {
      return ::testing::AssertionFailure() << "element " << i << " expected " << e[i] << " got " << a[i] << " (rtol "
                                           << rtol << ", atol " << atol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Fills the allocator's free blocks up to `bytes` with 0xFF (NaN in every floating dtype, true in bool)
// by allocating, setting and freeing one block, so that an op whose output comes from the caching
// allocator and leaves elements unwritten fails the comparison instead of reading stale good values.
inline void poison_device_cache(int64_t bytes) {
#ifdef MANTISSA_WITH_CUDA
  Tensor junk = empty({bytes}, {.dtype = DType::kBool, .device = cuda(0)});
  if (cudaMemset(junk.data_ptr(), 0xFF, static_cast<size_t>(bytes)) != cudaSuccess) ADD_FAILURE() << "cudaMemset";
  if (cudaDeviceSynchronize() != cudaSuccess) ADD_FAILURE() << "cudaDeviceSynchronize";
#else
  (void)bytes;
#endif
}

// `t` copied to GPU 0 through a poisoned allocator cache (the copy and the ops after it draw their blocks
// from memory that reads as NaN until written).
inline Tensor on_cuda(const Tensor& t) {
  poison_device_cache(t.numel() * 8 + 4096);
  return t.to(cuda(0));
}

}  // namespace mantissa::testing

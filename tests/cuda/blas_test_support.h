// Helpers for the CUDA GEMM and convolution tests: the skip without a device, device buffers poisoned
// before a launch, and the error bound a GPU result is held to against the CPU's.
//
// The bound. Both backends compute each output as a sum of `depth` products, accumulated in u_acc
// (2^-24 for f32 and 16-bit operands, 2^-53 for f64), in different orders: each is within
// depth * u_acc * S of the exact sum, S = sum |a_i b_i| (the standard dot-product bound), so they differ
// by at most 2 depth u_acc S. A 16-bit output is then rounded once by each; two roundings of values that
// close differ by at most one ulp of the output, 2 u_out |ref|. S is computed exactly enough in f64 on the
// CPU from the absolute values of the operands (the same product with |a| and |b|).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "framework/cuda/device.h"
#include "framework/dtype.h"
#include "tests/support/cuda_skip.h"

#ifdef MANTISSA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mantissa::testing {

// Unit roundoff of the accumulation (f32 for every dtype but f64) and of the output type.
inline double accumulate_roundoff(DType d) { return d == DType::kF64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24); }
inline double output_roundoff(DType d) {
  switch (d) {
    case DType::kF64: return std::ldexp(1.0, -53);
    case DType::kF16: return std::ldexp(1.0, -11);
    case DType::kBF16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

// Counts the elements where |got - ref| exceeds slack * 2 depth u_acc S + 2 u_out |ref| (see the top of
// the file), or where got is not finite; prints the first few. `abs_sum` holds S per element. `sum_rounded_first`
// allows one more output rounding, of the product before a bias or C is added (u_out S): cuBLASLt's bf16 GEMMs
// that add a bias or C (bench/gpu/2026-11-28-run3).
inline int64_t count_beyond_bound(const std::vector<double>& got, const std::vector<double>& ref,
                                  const std::vector<double>& abs_sum, int64_t depth, DType dtype, double slack = 1.0,
                                  bool sum_rounded_first = false) {
  EXPECT_EQ(got.size(), ref.size());
  EXPECT_EQ(abs_sum.size(), ref.size());
  const double ua = accumulate_roundoff(dtype), uo = output_roundoff(dtype);
  int64_t bad = 0;
  for (size_t i = 0; i < got.size() && i < ref.size() && i < abs_sum.size(); ++i) {
    const double bound = slack * 2.0 * static_cast<double>(depth) * ua * abs_sum[i] +
                         (dtype == DType::kF32 || dtype == DType::kF64 ? 0.0 : 2.0 * uo * std::abs(ref[i])) +
                         (sum_rounded_first ? uo * abs_sum[i] : 0.0);
    const double err = std::abs(got[i] - ref[i]);
    if (!std::isfinite(got[i]) || err > bound) {
      if (bad < 5) ADD_FAILURE() << "element " << i << ": got " << got[i] << ", CPU " << ref[i] << ", bound " << bound;
      ++bad;
    }
  }
  return bad;
}

#ifdef MANTISSA_WITH_CUDA
// A device buffer of `count` elements of T, filled with 0xFF bytes (nan in every floating type) so that
// an element a kernel forgets to write fails the comparison.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<size_t>(count, 1) * sizeof(T)), cudaSuccess);
    poison();
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { (void)cudaFree(ptr_); }
  T* get() const { return static_cast<T*>(ptr_); }
  void poison() { EXPECT_EQ(cudaMemset(ptr_, 0xFF, std::max<size_t>(count_, 1) * sizeof(T)), cudaSuccess); }
  void upload(const std::vector<T>& host) {
    ASSERT_LE(host.size(), count_);
    ASSERT_EQ(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> download() const {  // synchronizes the device first (cudaMemcpy is synchronous)
    std::vector<T> host(count_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t count_;
};
#endif  // MANTISSA_WITH_CUDA

}  // namespace mantissa::testing

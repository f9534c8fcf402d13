// CUDA smoke test: device discovery never fails, and the fill kernel writes every element on a GPU.
// Compiles with and without MANTISSA_WITH_CUDA; without a device the kernel test is skipped.
#include <gtest/gtest.h>

#include "framework/cuda/device.h"
#include "framework/error.h"
#include "tests/support/cuda_skip.h"

namespace mantissa {
namespace {

TEST(CudaSmoke, DeviceCountExplainsZero) {
  const int count = cuda_device_count();
  EXPECT_GE(count, 0);
  // A zero count always says why; a positive one has nothing to explain.
  EXPECT_EQ(count == 0, !cuda_unavailable_reason().empty()) << cuda_unavailable_reason();
#ifndef MANTISSA_WITH_CUDA
  EXPECT_EQ(count, 0);
#endif
}

TEST(CudaSmoke, FillWithoutDeviceThrows) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present; see FillKernelWritesEveryElement";
  try {
    cuda_fill(16, 1.0f);
    FAIL() << "cuda_fill without a device returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda_fill: no CUDA device"), std::string::npos) << e.what();
  }
}

TEST(CudaSmoke, FillKernelWritesEveryElement) {
  MT_SKIP_WITHOUT_CUDA();
  // Not a multiple of the 256-thread block, so the tail block's bounds check is exercised. The kernel
  // only stores, so every element must equal the value exactly.
  const int64_t n = (int64_t{1} << 20) + 3;
  const std::vector<float> out = cuda_fill(n, 2.5f);
  ASSERT_EQ(static_cast<int64_t>(out.size()), n);
  int64_t wrong = 0;
  for (float v : out) wrong += (v != 2.5f);
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(cuda_fill(0, 1.0f).empty());
}

}  // namespace
}  // namespace mantissa

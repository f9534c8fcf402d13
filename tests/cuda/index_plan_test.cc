// Host checks of the CUDA index kernels' offset math (ops/shape/index_math.h): gather_offset over a
// plan_gather geometry reads the same elements as the CPU gather, for strided inputs in every dim.
#include <gtest/gtest.h>

#include <vector>

#include "framework/generator.h"
#include "ops/shape/index_math.h"
#include "ops/shape/shape.h"

namespace mantissa {
namespace {

TEST(CudaIndexPlan, GatherOffsetsReadWhatTheCpuGatherReads) {
  // x is [5, 6, 7] seen through a transpose (non-contiguous); the index is [3, 4, 2] < x in every dim.
  std::vector<double> xv(5 * 6 * 7);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<double>(i);
  const Tensor base = from_vector<double>(xv, {7, 6, 5});
  const Tensor x = base.transpose(0, 2);  // [5, 6, 7], strides {1, 5, 30}
  Generator gen(5);
  for (int64_t dim = 0; dim < 3; ++dim) {
    const Shape ishape{3, 4, 2};
    std::vector<int64_t> iv(24);
    for (int64_t& v : iv) v = static_cast<int64_t>(gen.next_u32() % static_cast<uint32_t>(x.size(dim)));
    const Tensor index = from_vector<int64_t>(iv, ishape);
    const Tensor expected = gather(x, dim, index);
    const gpu::GatherPlan plan = gpu::plan_gather(ishape, x.strides(), dim, x.size(dim));
    ASSERT_TRUE(plan.ok);
    EXPECT_EQ(plan.geometry.numel, 24);
    const double* xp = x.data<double>();
    const double* ep = expected.data<double>();
    for (int64_t p = 0; p < 24; ++p) {
      EXPECT_EQ(xp[gpu::gather_offset(plan.geometry, p, iv[static_cast<size_t>(p)])], ep[p])
          << "dim " << dim << " position " << p;
    }
  }
}

TEST(CudaIndexPlan, ZeroDimAndTooManyDims) {
  // A 0-d gather: one position, offset 0 whatever the (in-range) index.
  const gpu::GatherPlan scalar = gpu::plan_gather({}, {}, 0, 1);
  ASSERT_TRUE(scalar.ok);
  EXPECT_EQ(scalar.geometry.numel, 1);
  EXPECT_EQ(gpu::gather_offset(scalar.geometry, 0, 0), 0);
  // More dims than the kernel's fixed arrays hold are refused (the op turns that into an error).
  const Shape nine(9, 1);
  EXPECT_FALSE(gpu::plan_gather(nine, nine, 0, 1).ok);
  EXPECT_TRUE(gpu::index_in_range(0, 3));
  EXPECT_FALSE(gpu::index_in_range(3, 3));
  EXPECT_FALSE(gpu::index_in_range(-1, 3));
}

}  // namespace
}  // namespace mantissa

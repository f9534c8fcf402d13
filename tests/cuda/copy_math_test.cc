// The host-side parts of the CUDA copy kernels, run on the CPU: the __host__ __device__ conversions and
// casts of copy_math.h against the CPU's Half/BFloat16 and copy_/accumulate_, the strided offset
// calculator against the tensors' own strides, and the launch geometry.
#include "framework/cuda/copy_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "framework/cuda/transfer.h"
#include "framework/random.h"
#include "framework/tensor.h"

namespace mantissa::gpu {
namespace {

TEST(CudaCopyMath, HalfAndBFloat16ToFloatMatchTheCpuForEveryPattern) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto h = static_cast<uint16_t>(b);
    ASSERT_EQ(float_to_bits(f16_bits_to_f32(h)), float_to_bits(static_cast<float>(Half::from_bits(h)))) << b;
    ASSERT_EQ(float_to_bits(bf16_bits_to_f32(h)), float_to_bits(static_cast<float>(BFloat16::from_bits(h)))) << b;
  }
}

// The FP8 casts of the copy kernel are framework/float8.h's own functions; check the kernel-side wrappers
// (widen/narrow over the F8 storage tags) give the scalar types' bits for every pattern and many floats.
TEST(CudaCopyMath, Float8CastsMatchTheScalarTypes) {
  for (uint32_t b = 0; b < 256; ++b) {
    const auto u = static_cast<uint8_t>(b);
    ASSERT_EQ(float_to_bits(widen(F8E4M3{u})), float_to_bits(static_cast<float>(Float8E4M3::from_bits(u)))) << b;
    ASSERT_EQ(float_to_bits(widen(F8E5M2{u})), float_to_bits(static_cast<float>(Float8E5M2::from_bits(u)))) << b;
  }
  for (uint64_t x = 0; x <= 0xffffffffull; x += 9973) {
    const float f = bits_to_float(static_cast<uint32_t>(x));
    ASSERT_EQ(narrow<F8E4M3>(f).bits, Float8E4M3(f).bits) << std::hex << x;
    ASSERT_EQ(narrow<F8E5M2>(f).bits, Float8E5M2(f).bits) << std::hex << x;
    ASSERT_EQ(cast_element<F8E5M2>(static_cast<double>(f)).bits, Float8E5M2(f).bits) << std::hex << x;
  }
}

TEST(CudaCopyMath, FloatToHalfAndBFloat16MatchTheCpu) {
  // Every 97th float bit pattern (a prime stride reaches every exponent and many mantissa tails), plus
  // the rounding boundaries around the f16 range ends and the subnormals.
  std::vector<uint32_t> patterns;
  for (uint64_t x = 0; x <= 0xffffffffull; x += 97) patterns.push_back(static_cast<uint32_t>(x));
  for (uint32_t edge : {0x477fefffu, 0x477ff000u, 0x477ff001u, 0x38800000u, 0x387fffffu, 0x33000000u, 0x33000001u,
                        0x32ffffffu, 0x7f800000u, 0x7f800001u, 0x7fc00000u, 0xffc00001u, 0x3f801000u, 0x3f803000u}) {
    patterns.push_back(edge);
    patterns.push_back(edge | 0x80000000u);
  }
  for (uint32_t x : patterns) {
    const float f = bits_to_float(x);
    ASSERT_EQ(f32_to_f16_bits(f), Half(f).bits) << std::hex << x;
    ASSERT_EQ(f32_to_bf16_bits(f), BFloat16(f).bits) << std::hex << x;
  }
}

const std::vector<DType> kAllDTypes = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                                       DType::kI64, DType::kI32, DType::kBool};

// Finite values inside every integer range, with ties, subnormals and values beyond f16/f32 precision.
const std::vector<double> kSafeValues = {0.0,     -0.0,       1.0,    -1.0, 2.5,   -3.5,      0.1,
                                         1.0 / 3, 1000.7,     -65504, 3e-5, 6e-8,  1e-40,     257.0,
                                         2049.0,  16777217.0, -7.75,  0.5,  100.0, -2147483.0};
// Values only floating destinations can take (converting them to an integer is undefined behaviour).
const std::vector<double> kFloatOnlyValues = {INFINITY, -INFINITY, NAN, 1e30, 70000.0, -1e-45, 65520.0};

// Applies cast_element<D, S> to every element of `src` and compares the bytes with the CPU's copy_.
void expect_cast_matches_cpu(const Tensor& src, DType to) {
  const Tensor expected = src.to(to);
  dispatch_all(src.dtype(), "test", [&]<typename S>() {
    dispatch_all(to, "test", [&]<typename D>() {
      using KS = storage_t<S>;
      using KD = storage_t<D>;
      static_assert(sizeof(KS) == sizeof(S) && sizeof(KD) == sizeof(D));
      const auto* in = static_cast<const char*>(src.data_ptr());
      const auto* want = static_cast<const char*>(expected.data_ptr());
      for (int64_t i = 0; i < src.numel(); ++i) {
        KS s;
        std::memcpy(&s, in + i * sizeof(S), sizeof(S));
        const KD d = cast_element<KD>(s);
        EXPECT_EQ(std::memcmp(&d, want + i * sizeof(D), sizeof(D)), 0)
            << dtype_name(src.dtype()) << " -> " << dtype_name(to) << " element " << i << " of " << src.str();
      }
    });
  });
}

TEST(CudaCopyMath, CastsMatchCpuCopyForEveryDTypePair) {
  const Tensor wide = from_vector<double>(kFloatOnlyValues);
  for (DType from : kAllDTypes) {
    // An f16 source holds inf for values past 65504, which must not reach an integer destination.
    std::vector<double> safe;
    for (double v : kSafeValues) {
      if (from != DType::kF16 || std::abs(v) <= 65504) safe.push_back(v);
    }
    const Tensor src = from_vector<double>(safe).to(from);
    for (DType to : kAllDTypes) expect_cast_matches_cpu(src, to);
    if (!is_floating(from)) continue;
    const Tensor src_wide = wide.to(from);
    for (DType to : kAllDTypes) {
      if (is_floating(to) || to == DType::kBool) expect_cast_matches_cpu(src_wide, to);
    }
  }
}

TEST(CudaCopyMath, AddMatchesCpuAccumulate) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    const Tensor a = randn({1000}).to(dtype);
    const Tensor b = (randn({1000})).to(dtype);
    const Tensor sum = a.clone();
    accumulate_(sum, b);
    dispatch_floating(dtype, "test", [&]<typename T>() {
      using K = storage_t<T>;
      for (int64_t i = 0; i < a.numel(); ++i) {
        K x, y, want;
        std::memcpy(&x, a.data<T>() + i, sizeof(T));
        std::memcpy(&y, b.data<T>() + i, sizeof(T));
        std::memcpy(&want, sum.data<T>() + i, sizeof(T));
        const K got = add_element(x, y);
        ASSERT_EQ(std::memcmp(&got, &want, sizeof(T)), 0) << dtype_name(dtype) << " element " << i;
      }
    });
  }
}

// The offsets the kernel computes for each linear index equal those of the view's own multi-index.
void expect_offsets_follow_strides(const Tensor& dst, const Tensor& src) {
  StridedOffsets<2> geom;
  ASSERT_TRUE(plan_strided<2>(dst.shape(), {&dst.strides(), &src.strides()}, geom));
  const int64_t n = dst.numel();
  std::vector<int64_t> idx(dst.shape().size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t want[2] = {0, 0};
    for (size_t d = 0; d < idx.size(); ++d) {
      want[0] += idx[d] * dst.strides()[d];
      want[1] += idx[d] * src.strides()[d];
    }
    int64_t got[2];
    geom.get(i, got);
    ASSERT_EQ(got[0], want[0]) << "linear index " << i;
    ASSERT_EQ(got[1], want[1]) << "linear index " << i;
    for (size_t d = idx.size(); d-- > 0;) {  // row-major increment
      if (++idx[d] < dst.shape()[d]) break;
      idx[d] = 0;
    }
  }
}

TEST(CudaCopyMath, StridedOffsetsFollowTheViews) {
  const Tensor base = zeros({4, 5, 6, 7});
  const Tensor contiguous = zeros({7, 4, 3, 5});
  const Tensor permuted = base.permute({3, 0, 2, 1}).slice(2, 0, 6, 2);  // [7, 4, 3, 5], gaps and transposes
  expect_offsets_follow_strides(contiguous, permuted);
  expect_offsets_follow_strides(permuted, contiguous);
  const Tensor expanded = zeros({5, 1}).expand({5, 9});  // stride 0
  expect_offsets_follow_strides(zeros({5, 9}), expanded);
  const Tensor scalar = zeros({});
  expect_offsets_follow_strides(scalar, scalar);

  StridedOffsets<2> geom;
  ASSERT_TRUE(plan_strided<2>(contiguous.shape(), {&contiguous.strides(), &contiguous.strides()}, geom));
  EXPECT_TRUE(geom.contiguous());  // all dims merge into one
  ASSERT_TRUE(plan_strided<2>(contiguous.shape(), {&contiguous.strides(), &permuted.strides()}, geom));
  EXPECT_FALSE(geom.contiguous());
}

TEST(CudaCopyMath, MoreThanEightUnmergeableDimsAreRefused) {
  // Reversing the dims of a 9-d tensor leaves no two neighbours mergeable.
  const Tensor t = zeros(Shape(9, 2)).permute({8, 7, 6, 5, 4, 3, 2, 1, 0});
  const Tensor c = zeros(Shape(9, 2));
  StridedOffsets<2> geom;
  EXPECT_FALSE(plan_strided<2>(c.shape(), {&c.strides(), &t.strides()}, geom));
  EXPECT_TRUE(plan_strided<2>(c.shape(), {&c.strides(), &c.strides()}, geom));  // contiguous: one dim
}

TEST(CudaCopyMath, LaunchGeometry) {
  EXPECT_EQ(copy_blocks(0), 1);
  EXPECT_EQ(copy_blocks(1), 1);
  EXPECT_EQ(copy_blocks(256), 1);
  EXPECT_EQ(copy_blocks(257), 2);
  EXPECT_EQ(copy_blocks(int64_t{1} << 40), kMaxCopyBlocks);  // grid-stride covers the rest
}

}  // namespace
}  // namespace mantissa::gpu

// Precision (train/precision.h): every name in the table round trips and names one precision, an unknown
// name is refused with the valid ones listed, each precision's dtype, and PrecisionScope's autocast.
#include "train/precision.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "framework/autocast_state.h"

namespace mantissa {
namespace {

TEST(Precision, EveryNameRoundTrips) {
  std::set<std::string> names;
  for (const PrecisionName& p : kPrecisionNames) {
    EXPECT_STREQ(precision_name(p.value), p.name);
    absl::StatusOr<Precision> parsed = parse_precision(p.name);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, p.value);
    names.insert(p.name);
  }
  EXPECT_EQ(names, (std::set<std::string>{"fp32", "fp16", "bf16", "fp8"}));
}

TEST(Precision, AnUnknownNameListsTheValidOnes) {
  for (const char* bad : {"fp4", "", "FP16", "float16"}) {
    absl::StatusOr<Precision> parsed = parse_precision(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              "unknown precision '" + std::string(bad) + "' (expected fp32, fp16, bf16 or fp8)");
  }
}

TEST(Precision, DTypeOfEachPrecision) {
  EXPECT_EQ(precision_dtype(Precision::kF32), DType::kF32);
  EXPECT_EQ(precision_dtype(Precision::kF16), DType::kF16);
  EXPECT_EQ(precision_dtype(Precision::kBF16), DType::kBF16);
  EXPECT_EQ(precision_dtype(Precision::kFp8), DType::kBF16);  // the layers outside the FP8 linears
}

TEST(Precision, ScopeAutocastsToThePrecisionsDTypeAndFp32DoesNot) {
  const auto cpu = static_cast<size_t>(DeviceType::kCPU);
  ASSERT_FALSE(autocast_tls().enabled[cpu]);
  {
    PrecisionScope scope(Precision::kF32, kCPU, nullptr);
    EXPECT_FALSE(autocast_tls().enabled[cpu]);
  }
  for (Precision p : {Precision::kF16, Precision::kBF16}) {
    {
      PrecisionScope scope(p, kCPU, nullptr);
      EXPECT_TRUE(autocast_tls().enabled[cpu]) << precision_name(p);
      EXPECT_EQ(autocast_tls().dtype[cpu], precision_dtype(p)) << precision_name(p);
    }
    EXPECT_FALSE(autocast_tls().enabled[cpu]) << precision_name(p);
  }
}

}  // namespace
}  // namespace mantissa

#include "tests/support/golden.h"

#include <gtest/gtest.h>

namespace mantissa::testing {
namespace {

TEST(Golden, ReadsMlpFile) {
  GoldenFile f("mlp_sgd.h5");
  EXPECT_NE(f.attr_str("/", "about").find("SGD"), std::string::npos);
  EXPECT_EQ(f.shape("/init/0.weight"), (Shape{16, 20}));
  EXPECT_EQ(f.f64("/init/0.weight").size(), 320u);
  EXPECT_TRUE(f.has("/final/4.bias"));
  EXPECT_FALSE(f.has("/final/nope"));
  EXPECT_FALSE(f.has("/nogroup/x"));
  EXPECT_THROW(f.f64("/missing"), std::runtime_error);
}

}  // namespace
}  // namespace mantissa::testing

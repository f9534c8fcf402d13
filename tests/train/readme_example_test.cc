// The README's training program is examples/train_fashion_mnist.cc verbatim (the build compiles it and
// ctest runs it as example_train_fashion_mnist), so the README cannot drift from code that works.
#include <gtest/gtest.h>

#include "tests/support/doc_example.h"

namespace mantissa::testing {
namespace {

TEST(ReadmeTrainingExample, IsTheExampleFileVerbatim) {
  const std::string readme = read_text_file(source_path("README.md"));
  const std::string example = read_text_file(source_path("examples/train_fashion_mnist.cc"));
  ASSERT_FALSE(example.empty());
  EXPECT_TRUE(shows_verbatim(readme, example)) << "README.md no longer shows examples/train_fashion_mnist.cc";
}

}  // namespace
}  // namespace mantissa::testing

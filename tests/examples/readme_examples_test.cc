// The README's mixed-precision recipes ("Mixed-precision recipes in your own loop") are the files in
// examples/ verbatim; the build compiles them and ctest runs them (example_<name>_fp16 / _bf16), so the
// README cannot drift from code that works.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/doc_example.h"

namespace mantissa::testing {
namespace {

TEST(ReadmeRecipeExamples, AreTheExampleFilesVerbatim) {
  const std::string readme = read_text_file(source_path("README.md"));
  for (const char* name :
       {"amp_grad_clipping", "amp_grad_accumulation", "amp_multiple_models", "amp_ddp", "amp_custom_function"}) {
    const std::string file = std::string("examples/") + name + ".cc";
    const std::string example = read_text_file(source_path(file));
    ASSERT_FALSE(example.empty()) << file;
    EXPECT_TRUE(shows_verbatim(readme, example)) << "README.md no longer shows " << file;
  }
}

}  // namespace
}  // namespace mantissa::testing

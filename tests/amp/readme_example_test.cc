// The AutocastGuard example of amp/README.md, compiled and run here; a second test checks that the README
// shows exactly the code between the markers below, so the two cannot drift.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/random.h"
#include "ops/loss.h"
#include "ops/matmul.h"

namespace mantissa {
namespace {

TEST(AmpReadme, AutocastExampleRuns) {
  // README-EXAMPLE-BEGIN
  // fp32 master weights; the forward runs under autocast, the backward after it.
  Tensor w = randn({10, 784}, {.requires_grad = true});
  Tensor b = zeros({10}, {.requires_grad = true});
  Tensor x = randn({32, 784});
  Tensor target = zeros({32}, {.dtype = DType::kI64});
  Tensor logits, loss;
  {
    amp::AutocastGuard autocast({.dtype = DType::kBF16});
    logits = linear(x, w, b);               // bf16: lower precision; w and b are cast once per region
    loss = cross_entropy(logits, target);   // f32: an fp32 op widens its bf16 input
  }
  loss.backward();                          // w.grad() and b.grad() are f32, like w and b
  // README-EXAMPLE-END
  EXPECT_EQ(logits.dtype(), DType::kBF16);
  EXPECT_EQ(loss.dtype(), DType::kF32);
  EXPECT_EQ(w.grad().dtype(), DType::kF32);
  EXPECT_EQ(b.grad().dtype(), DType::kF32);
  EXPECT_EQ(amp::cache_size(), 0u);
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The lines between the markers, with the test's two-space indent removed.
std::string example_from_this_file() {
  std::istringstream in(read(std::string(MANTISSA_GOLDEN_DIR) + "/../amp/readme_example_test.cc"));
  std::string line, out;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.find("README-EXAMPLE-END") != std::string::npos) break;
    if (inside) out += (line.rfind("  ", 0) == 0 ? line.substr(2) : line) + "\n";
    if (line.find("README-EXAMPLE-BEGIN") != std::string::npos) inside = true;
  }
  return out;
}

TEST(AmpReadme, ReadmeShowsTheCompiledExample) {
  const std::string example = example_from_this_file();
  ASSERT_FALSE(example.empty());
  const std::string readme = read(std::string(MANTISSA_GOLDEN_DIR) + "/../../amp/README.md");
  EXPECT_NE(readme.find("```cpp\n" + example + "```"), std::string::npos)
      << "amp/README.md must show this example verbatim:\n" << example;
}

}  // namespace
}  // namespace mantissa

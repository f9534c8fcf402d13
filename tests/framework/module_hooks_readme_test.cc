// The hooks example of framework/README.md (a per-layer dtype table under autocast), compiled and run here;
// a second test checks that the README shows exactly the code between the markers below.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "framework/module.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "tests/support/doc_example.h"

namespace mantissa {
namespace {

using ::testing::HasSubstr;

// Sends std::cout to a string for the scope, so that the test can read what the example prints.
class CaptureCout {
 public:
  CaptureCout() : old_(std::cout.rdbuf(out_.rdbuf())) {}
  ~CaptureCout() { std::cout.rdbuf(old_); }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::streambuf* old_;
};

TEST(FrameworkReadme, HooksExamplePrintsTheDtypeTable) {
  CaptureCout capture;
  // README-HOOKS-EXAMPLE-BEGIN
  MLP model(784, {256}, 10);  // fp32 weights; the inputs stay fp32 too: autocast decides
  std::vector<HookHandle> handles;
  for (const auto& [path, module] : model.named_modules()) {
    const std::string name = path.empty() ? "(model)" : path;
    handles.push_back(
        module->register_forward_hook([name](Module& m, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
          std::cout << "  " << std::left << std::setw(10) << name << std::setw(12) << m.type_name()
                    << dtype_name(in[0].dtype()) << " -> " << dtype_name(out[0].dtype()) << "\n";
        }));
  }
  const Tensor x = randn({32, 784});
  std::cout << "fp32:\n";
  model.forward(x);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::cout << "autocast " << dtype_name(dtype) << ":\n";
    amp::AutocastGuard autocast({.dtype = dtype});
    model.forward(x);
  }
  for (HookHandle& h : handles) h.remove();  // the model runs without hooks again
  // README-HOOKS-EXAMPLE-END
  const std::string table = capture.str();
  EXPECT_THAT(table, HasSubstr("autocast f16:\n"
                               "  layers.0  Linear      f32 -> f16\n"
                               "  layers.1  ReLU        f16 -> f16\n"
                               "  layers.2  Linear      f16 -> f16\n"
                               "  layers    Sequential  f32 -> f16\n"
                               "  (model)   MLP         f32 -> f16\n"));
  EXPECT_THAT(table, HasSubstr("fp32:\n  layers.0  Linear      f32 -> f32\n"));
  EXPECT_THAT(table, HasSubstr("autocast bf16:\n  layers.0  Linear      f32 -> bf16\n"));
  for (const auto& [path, module] : model.named_modules()) EXPECT_FALSE(module->has_hooks()) << path;
}

TEST(FrameworkReadme, ShowsTheCompiledHooksExample) {
  EXPECT_TRUE(testing::readme_shows_example("framework/README.md", "tests/framework/module_hooks_readme_test.cc",
                                            "README-HOOKS-EXAMPLE-BEGIN", "README-HOOKS-EXAMPLE-END"));
}

}  // namespace
}  // namespace mantissa

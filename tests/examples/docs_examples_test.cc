// The complete programs in examples/ that docs/ shows are shown there verbatim: the build compiles each one
// and ctest runs it (example_<name>, example_<name>_<precision>), so the docs cannot drift from code that
// works. The front page's loop has its own test (front_page_loop_test.cc).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/doc_example.h"

namespace mantissa::testing {
namespace {

// Each page of docs/ and the examples/<name>.cc files it shows in full.
const std::vector<std::pair<std::string, std::vector<std::string>>>& pages() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kPages = {
      {"docs/library.md", {"train_fashion_mnist"}},
      {"docs/amp-recipes.md",
       {"amp_grad_clipping", "amp_grad_accumulation", "amp_multiple_models", "amp_ddp", "amp_custom_function",
        "gradient_penalty"}},
      {"docs/precision_ladder.md", {"bf16_weights"}},
  };
  return kPages;
}

TEST(DocsExamples, AreTheExampleFilesVerbatim) {
  for (const auto& [page, names] : pages()) {
    const std::string text = read_text_file(source_path(page));
    for (const std::string& name : names) {
      const std::string file = "examples/" + name + ".cc";
      const std::string example = read_text_file(source_path(file));
      ASSERT_FALSE(example.empty()) << file;
      EXPECT_TRUE(shows_verbatim(text, example)) << page << " no longer shows " << file;
    }
  }
}

// A new program in examples/ is shown by some page of docs/ (and listed above), or this fails.
TEST(DocsExamples, EveryExampleFileIsShown) {
  std::set<std::string> shown;
  for (const auto& [page, names] : pages()) shown.insert(names.begin(), names.end());
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(source_path("examples"))) {
    if (entry.path().extension() != ".cc") continue;
    ++files;
    EXPECT_TRUE(shown.contains(entry.path().stem().string()))
        << entry.path().filename() << " is in examples/ but no page of docs/ is listed here as showing it";
  }
  EXPECT_EQ(files, static_cast<int>(shown.size()));  // and every name listed is a file there
}

}  // namespace
}  // namespace mantissa::testing

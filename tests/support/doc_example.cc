#include "tests/support/doc_example.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "tests/support/golden.h"

namespace mantissa::testing {

std::string source_path(const std::string& relative) {
  return golden_dir() + "/../../" + relative;  // tests/golden -> repository root
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string example_between(const std::string& file, const std::string& begin_marker, const std::string& end_marker) {
  std::istringstream in(read_text_file(file));
  std::string line, out;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.find(end_marker) != std::string::npos) break;
    if (inside) out += (line.rfind("  ", 0) == 0 ? line.substr(2) : line) + "\n";
    if (line.find(begin_marker) != std::string::npos) inside = true;
  }
  return out;
}

bool shows_verbatim(const std::string& readme, const std::string& example) {
  return readme.find("```cpp\n" + example + "```") != std::string::npos;
}

::testing::AssertionResult readme_shows_example(const std::string& readme, const std::string& test_file,
                                                const std::string& begin_marker, const std::string& end_marker) {
  const std::string example = example_between(source_path(test_file), begin_marker, end_marker);
  if (example.empty()) {
    return ::testing::AssertionFailure() << test_file << " has no example between " << begin_marker << " and "
                                         << end_marker;
  }
  if (!shows_verbatim(read_text_file(source_path(readme)), example)) {
    return ::testing::AssertionFailure() << readme << " must show this example verbatim:\n" << example;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace mantissa::testing

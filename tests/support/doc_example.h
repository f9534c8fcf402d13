// Keeps code examples in READMEs compiled: a test holds the example between two marker comments, and
// these helpers check that a README shows exactly those lines (STYLE.md item 12).
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace mantissa::testing {

// Path of a file in the source tree, relative to the repository root (e.g. "amp/README.md").
std::string source_path(const std::string& relative);
std::string read_text_file(const std::string& path);
// The lines of `file` strictly between the line holding `begin_marker` and the one holding `end_marker`,
// with the test's two-space indent removed.
std::string example_between(const std::string& file, const std::string& begin_marker, const std::string& end_marker);
// True when `readme` contains "```cpp\n" + example + "```".
bool shows_verbatim(const std::string& readme, const std::string& example);
// The check each README test makes: the example between the markers of `test_file` is not empty and `readme`
// shows it verbatim (both paths relative to the repository root); the failure message prints the example.
::testing::AssertionResult readme_shows_example(const std::string& readme, const std::string& test_file,
                                                const std::string& begin_marker, const std::string& end_marker);

}  // namespace mantissa::testing

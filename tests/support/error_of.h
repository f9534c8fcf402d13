// error_of(f): the message of the mantissa::Error that f throws, or "(no error)": for tests that check what a
// refusal says (EXPECT_THAT(error_of([&] { ... }), HasSubstr("..."))).
#pragma once

#include <functional>
#include <string>

#include "framework/error.h"

namespace mantissa::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace mantissa::testing

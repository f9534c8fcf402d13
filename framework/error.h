// Errors: mantissa::Error for user mistakes (MT_CHECK), an always-on abort for broken invariants
// (MT_ASSERT). Messages name the op, the arguments, their shapes and dtypes, and suggest a fix.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace mantissa {

// Thrown for every user mistake the library detects (shape, dtype, device, misuse of an API).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
// Concatenates anything an ostream can print (strings, string_views, numbers, enums with operator<<).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace mantissa

// MT_CHECK(cond, pieces...): throws mantissa::Error(StrCat(pieces...)) when cond is false.
// Pieces are anything an ostream prints; shapes format with mantissa::shape_str().
#define MT_CHECK(cond, ...)                                          \
  do {                                                               \
    if (!(cond)) [[unlikely]] {                                      \
      throw ::mantissa::Error(::mantissa::detail::cat(__VA_ARGS__)); \
    }                                                                \
  } while (0)

// MT_THROW(pieces...): unconditional form of MT_CHECK.
#define MT_THROW(...)                                              \
  do {                                                             \
    throw ::mantissa::Error(::mantissa::detail::cat(__VA_ARGS__)); \
  } while (0)

// MT_ASSERT(cond, pieces...): internal invariant; prints expression, file:line and aborts. Always on.
#define MT_ASSERT(cond, ...)                                                                   \
  do {                                                                                         \
    if (!(cond)) [[unlikely]] {                                                                \
      ::mantissa::detail::assert_fail(#cond, __FILE__, __LINE__,                               \
                                      ::mantissa::detail::cat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                          \
  } while (0)

#include "framework/error.h"

#include <cstdio>
#include <cstdlib>

namespace mantissa::detail {

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "mantissa internal error: %s:%d: check '%s' failed%s%s\n", file, line, expr,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace mantissa::detail

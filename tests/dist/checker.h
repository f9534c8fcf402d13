// The check counter of a suite of mantissa_dist_tests: counts every check and prints each failure with its
// rank and suite, so that dist_test.sh shows which rank saw what.
#pragma once

#include <cstdio>
#include <string>

namespace mantissa {

struct DistChecker {
  int rank;
  const char* suite;
  int checks = 0, failures = 0;
  void expect(bool ok, const std::string& what) {
    ++checks;
    if (ok) return;
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED %s: %s\n", rank, suite, what.c_str());
  }
};

}  // namespace mantissa

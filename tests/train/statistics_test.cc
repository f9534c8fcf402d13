// median and median_after (train/statistics.h): odd and even counts, no values, the caller's values left
// in their order, and the warm-up left out unless it is all there is.
#include "train/statistics.h"

#include <gtest/gtest.h>

#include <vector>

namespace mantissa {
namespace {

TEST(Statistics, MedianOfAnOddCountIsTheMiddleValue) {
  const std::vector<double> v{5.0, 1.0, 3.0, 9.0, 2.0};
  EXPECT_EQ(median(v), 3.0);
  EXPECT_EQ(v, (std::vector<double>{5.0, 1.0, 3.0, 9.0, 2.0}));  // sorted in a copy
}

TEST(Statistics, MedianOfAnEvenCountIsTheMeanOfTheTwoMiddleValues) {
  EXPECT_EQ(median(std::vector<double>{4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(median(std::vector<double>{7.0, 7.0}), 7.0);
  EXPECT_EQ(median(std::vector<double>{10.0, -2.0}), 4.0);
}

TEST(Statistics, MedianOfNothingIsZero) { EXPECT_EQ(median(std::vector<double>{}), 0.0); }

TEST(Statistics, MedianAfterLeavesTheWarmUpOutUnlessThatIsAll) {
  // Two slow first steps, then 1, 2, 3: the warm-up would pull an unskipped median up to 3.
  const std::vector<double> rates{100.0, 90.0, 1.0, 2.0, 3.0};
  EXPECT_EQ(median(rates), 3.0);
  EXPECT_EQ(median_after(rates, 2), 2.0);
  EXPECT_EQ(median_after(rates, 0), 3.0);
  EXPECT_EQ(median_after(rates, 4), 3.0);  // one left after the warm-up
  EXPECT_EQ(median_after(rates, 5), 3.0);  // a run no longer than its warm-up: all of its steps
  EXPECT_EQ(median_after(rates, 10), 3.0);
  EXPECT_EQ(median_after(std::vector<double>{}, 10), 0.0);
}

}  // namespace
}  // namespace mantissa

// Statistics of a run's measurements: the median (the summary's samples/s is the median over the steps
// after warm-up, which one slow step cannot move).
#pragma once

#include <cstddef>
#include <span>

namespace mantissa {

// The median of `values`: the middle one, or the mean of the two middle ones when there is an even number;
// 0 when there is none.
double median(std::span<const double> values);

// The median of `values` after the first `skip` (warm-up steps), or of all of them when there are no
// more than `skip` (a run shorter than its warm-up still reports one).
double median_after(std::span<const double> values, size_t skip);

}  // namespace mantissa

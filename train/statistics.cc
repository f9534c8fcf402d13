// median and median_after (train/statistics.h).
#include "train/statistics.h"

#include <algorithm>
#include <vector>

namespace mantissa {

double median(std::span<const double> values) {
  if (values.empty()) return 0.0;
  std::vector<double> v(values.begin(), values.end());  // nth_element reorders: a copy
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  // Even: the other middle value is the largest of the lower half nth_element left before it.
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
  return m;
}

double median_after(std::span<const double> values, size_t skip) {
  return median(values.size() > skip ? values.subspan(skip) : values);
}

}  // namespace mantissa

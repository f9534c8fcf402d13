// Broadcasting rules (numpy's): shapes align at the right; sizes must match or be 1.
#include "framework/error.h"
#include "ops/cpu/loops.h"

namespace mantissa::cpu {

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MT_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast: sizes ", da, " and ", db, " differ at dim ", i, " (counting from the left of ",
             "the broadcast shape)");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  const Shape& ts = t.shape();
  MT_ASSERT(ts.size() <= shape.size(), "broadcast_strides: ", shape_str(ts), " to ", shape_str(shape));
  const size_t lead = shape.size() - ts.size();
  Shape out(shape.size(), 0);
  for (size_t i = 0; i < ts.size(); ++i) {
    MT_ASSERT(ts[i] == shape[lead + i] || ts[i] == 1, "broadcast_strides: ", shape_str(ts), " to ", shape_str(shape));
    out[lead + i] = ts[i] == 1 ? 0 : t.strides()[i];
  }
  return out;
}

}  // namespace mantissa::cpu

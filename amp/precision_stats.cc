#include "amp/precision_stats.h"

#include <algorithm>
#include <cmath>

#include "framework/error.h"

namespace mantissa::amp {
namespace {

// The values as fp32 (or f64), contiguous, on the host: the counts below are single passes over them.
template <typename F>
void for_each_value(const Tensor& t, F&& fn) {
  MT_CHECK(t.defined(), "precision statistics: the tensor is undefined");
  MT_CHECK(is_floating(t.dtype()), "precision statistics: the tensor must be floating, got ", dtype_name(t.dtype()));
  const Tensor host = t.to(kCPU).to(DType::kF64).contiguous();
  const double* p = host.data<double>();
  for (int64_t i = 0; i < host.numel(); ++i) fn(p[i]);
}

}  // namespace

RangeFractions range_fractions(const Tensor& values) {
  RangeFractions r;
  int64_t above = 0, below_normal = 0, below_sub = 0, nonfinite = 0;
  for_each_value(values, [&](double v) {
    const double a = std::fabs(v);
    if (!std::isfinite(v)) {
      ++nonfinite;
    } else if (a > fp16_limits::kMax) {
      ++above;
    } else if (a > 0 && a < fp16_limits::kMinNormal) {
      ++below_normal;
      if (a < fp16_limits::kMinSubnormal) ++below_sub;
    }
  });
  r.numel = values.numel();
  if (r.numel == 0) return r;
  const auto n = static_cast<double>(r.numel);
  r.above_f16_max = static_cast<double>(above) / n;
  r.below_f16_normal = static_cast<double>(below_normal) / n;
  r.below_f16_subnormal = static_cast<double>(below_sub) / n;
  r.nonfinite = static_cast<double>(nonfinite) / n;
  return r;
}

ScaledUnderflow scaled_underflow(const Tensor& grad, double scale) {
  MT_CHECK(scale > 0 && std::isfinite(scale), "scaled_underflow: the scale must be positive and finite, got ", scale);
  ScaledUnderflow r;
  int64_t under = 0, sub = 0, over = 0;
  double min_abs = INFINITY;
  for_each_value(grad, [&](double v) {
    const double a = std::fabs(v);
    if (a == 0 || !std::isfinite(v)) return;
    ++r.nonzero;
    r.max_abs = std::max(r.max_abs, a);
    min_abs = std::min(min_abs, a);
    const double s = a * scale;
    if (s <= fp16_limits::kRoundsToZeroAtMost) {
      ++under;
    } else if (s < fp16_limits::kMinNormal) {
      ++sub;
    } else if (s >= fp16_limits::kOverflowAt) {
      ++over;
    }
  });
  r.numel = grad.numel();
  r.min_abs_nonzero = r.nonzero > 0 ? min_abs : 0;
  if (r.nonzero == 0) return r;
  const auto n = static_cast<double>(r.nonzero);
  r.underflow = static_cast<double>(under) / n;
  r.subnormal = static_cast<double>(sub) / n;
  r.overflow = static_cast<double>(over) / n;
  return r;
}

double suggested_loss_scale(double max_abs, int headroom_bits) {
  MT_CHECK(headroom_bits >= 0, "suggested_loss_scale: headroom_bits must be >= 0, got ", headroom_bits);
  if (!(max_abs > 0) || !std::isfinite(max_abs)) return 0x1p24;  // nothing to keep in range: the cap
  const double limit = std::ldexp(fp16_limits::kMax, -headroom_bits);
  // The largest power of two s with max_abs * s <= limit.
  int e = static_cast<int>(std::floor(std::log2(limit / max_abs)));
  while (std::ldexp(max_abs, e) > limit) --e;  // log2's rounding, either way
  while (std::ldexp(max_abs, e + 1) <= limit) ++e;
  return std::ldexp(1.0, std::clamp(e, 0, 24));
}

Log2Histogram::Log2Histogram() : counts_(static_cast<size_t>(kMaxExponent - kMinExponent + 1), 0) {}

void Log2Histogram::add(const Tensor& values, double scale) {
  MT_CHECK(scale > 0 && std::isfinite(scale), "Log2Histogram::add: the scale must be positive and finite, got ", scale);
  for_each_value(values, [&](double v) {
    const double a = std::fabs(v) * scale;
    if (!std::isfinite(a)) {
      ++nonfinite_;
      return;
    }
    if (a == 0) {
      ++zeros_;
      return;
    }
    int e = std::ilogb(a);  // exact: 2^e <= a < 2^(e+1)
    if (e < kMinExponent) {
      ++below_;
      e = kMinExponent;
    } else if (e > kMaxExponent) {
      ++above_;
      e = kMaxExponent;
    }
    ++counts_[static_cast<size_t>(e - kMinExponent)];
  });
}

int64_t Log2Histogram::total() const {
  int64_t n = zeros_ + nonfinite_;
  for (int64_t c : counts_) n += c;
  return n;
}

}  // namespace mantissa::amp

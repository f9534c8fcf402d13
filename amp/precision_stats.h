// What 16-bit formats would do to a tensor's values, counted: the numbers behind the precision report
// (amp/precision_report.h) and loss-scale advice. Each count works on fp32 values (the baseline) and
// asks where they fall against fp16's and bf16's limits:
//   fp16  largest finite 65504; values of magnitude >= 65520 round to inf. Smallest normal 2^-14;
//         smallest subnormal 2^-24; magnitudes <= 2^-25 round to zero (2^-25 itself ties to even, 0).
//   bf16  fp32's exponent range (largest finite ~3.39e38, smallest normal 2^-126, subnormal 2^-133).
// "Underflow" counts nonzero values that a cast would flush to zero: an exact zero loses nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace mantissa::amp {

namespace fp16_limits {
inline constexpr double kMax = 65504.0;                 // largest finite
inline constexpr double kOverflowAt = 65520.0;          // magnitudes from here round to inf
inline constexpr double kMinNormal = 0x1p-14;           // 6.10e-5
inline constexpr double kMinSubnormal = 0x1p-24;        // 5.96e-8
inline constexpr double kRoundsToZeroAtMost = 0x1p-25;  // magnitudes <= this round to 0
}  // namespace fp16_limits

// Where the values of a tensor fall against fp16's range, as fractions of all its elements.
struct RangeFractions {
  int64_t numel = 0;
  double above_f16_max = 0;        // |x| > 65504 (not representable: inf after a cast from 65520 on)
  double below_f16_normal = 0;     // 0 < |x| < 2^-14 (subnormal or zero in fp16: precision lost)
  double below_f16_subnormal = 0;  // 0 < |x| < 2^-24
  double nonfinite = 0;            // inf or nan already
};
RangeFractions range_fractions(const Tensor& values);

// What fp16 would do to gradient values multiplied by `scale` (1: unscaled), as fractions of the
// nonzero finite elements (`nonzero` of `numel`).
struct ScaledUnderflow {
  int64_t numel = 0;
  int64_t nonzero = 0;
  double max_abs = 0;          // of the unscaled values
  double min_abs_nonzero = 0;  // of the unscaled values (0 when all are zero)
  double underflow = 0;        // |g * scale| <= 2^-25: flushed to zero
  double subnormal = 0;        // 2^-25 < |g * scale| < 2^-14: kept with fewer than 11 significant bits
  double overflow = 0;         // |g * scale| >= 65520: inf, the step is skipped
};
ScaledUnderflow scaled_underflow(const Tensor& grad, double scale);

// The loss scale the data suggests: the largest power of two that keeps `max_abs` (the largest gradient
// magnitude over the whole model) at most 65504 / 2^headroom_bits after scaling, capped to [1, 2^24]. One
// bit of headroom by default: gradients of the next batches are rarely more than twice this one's.
double suggested_loss_scale(double max_abs, int headroom_bits = 1);

// A histogram of log2|x| over many tensors, in whole-exponent bins: bin e counts the nonzero finite values
// with 2^e <= |x| < 2^(e+1), for e in [kMinExponent, kMaxExponent]; smaller (and bigger) ones are counted
// in the first (last) bin and also in `below_range` (`above_range`); zeros and non-finite values are
// counted apart. add(t, scale) counts the values of t * scale (the picture after loss scaling).
class Log2Histogram {
 public:
  static constexpr int kMinExponent = -64;
  static constexpr int kMaxExponent = 32;
  Log2Histogram();
  void add(const Tensor& values, double scale = 1.0);
  const std::vector<int64_t>& counts() const { return counts_; }  // kMaxExponent - kMinExponent + 1 bins
  int64_t count_at(int exponent) const { return counts_[static_cast<size_t>(exponent - kMinExponent)]; }
  int64_t zeros() const { return zeros_; }
  int64_t nonfinite() const { return nonfinite_; }
  int64_t below_range() const { return below_; }
  int64_t above_range() const { return above_; }
  int64_t total() const;  // every value added, zeros and non-finite included

 private:
  std::vector<int64_t> counts_;
  int64_t zeros_ = 0, nonfinite_ = 0, below_ = 0, above_ = 0;
};

}  // namespace mantissa::amp

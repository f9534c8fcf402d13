// Histograms of a model's gradients for TensorBoard: the distribution of log2|g| over every element of
// every parameter's gradient (the picture that shows what fp16's range keeps: its smallest subnormal is
// 2^-24, its smallest normal 2^-14, its largest 65504 < 2^16), and the raw values in TensorFlow's default
// buckets (what PyTorch's SummaryWriter.add_histogram draws).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "framework/module.h"
#include "train/tensorboard_record.h"

namespace mantissa {

struct GradientHistograms {
  // log2|g| of the finite, nonzero elements, in buckets 1/2 wide whose limits are multiples of 1/2 (so that
  // 2^-24 and 2^-14 are edges). Zeros (log2 0 = -inf) and inf/nan are left out and counted below.
  tensorboard::Histogram log2_abs;
  // The finite values, in TensorFlow's default buckets (limits +-1e-12 * 1.1^k and 0), trimmed to the
  // nonempty ones.
  tensorboard::Histogram values;
  double zero_fraction = 0.0;       // of all the elements: exactly 0 (e.g. underflowed in fp16)
  double nonfinite_fraction = 0.0;  // of all the elements: inf or nan (a step the scaler skips)
  int64_t elements = 0;             // all the elements of all the grads
};

// The histograms of `params`' grads as they are (the Trainer calls it after unscaling, before clipping).
// Parameters without a grad are left out; GPU and f16/bf16 grads are read as f32 on the CPU.
GradientHistograms gradient_histograms(std::span<const NamedTensor> params);

// Counts finite values one at a time into right-closed buckets (limit[i - 1], limit[i]] over increasing
// `limits` (values below the first limit go to the first bucket, above the last to the last), so that the
// grads of a large model are bucketed without a copy of them all. finish(): the buckets from the first to
// the last nonempty one, and min, max, sum and sum_squares of the values added; none added: num 0 and no
// buckets.
class HistogramBuilder {
 public:
  explicit HistogramBuilder(std::vector<double> limits);
  void add(double v);
  // The same, searching from `near`, an index at or close to v's bucket: a caller that can compute where v
  // falls (uniform or geometric limits) saves the binary search, which dominates the cost of a gradient
  // histogram. Any `near` gives the right bucket; a good one gives it at once.
  void add(double v, size_t near);
  // Adds the counts and totals of `other`, built over the same limits.
  void merge(const HistogramBuilder& other);
  tensorboard::Histogram finish() const;

 private:
  void count(double v, size_t bucket);
  std::vector<double> limits_;
  std::vector<double> counts_;
  tensorboard::Histogram totals_;  // min, max, num, sum, sum_squares
};

// The histogram of `values` in `limits`' buckets (HistogramBuilder over all of them).
tensorboard::Histogram histogram(std::span<const double> values, std::vector<double> limits);

// TensorFlow's default bucket limits: 0 and +-1e-12 * 1.1^k for each k that keeps them below 1e20 in
// magnitude, in increasing order, then the largest double (the first bucket takes everything below the
// first limit, so every finite value has a bucket).
const std::vector<double>& default_bucket_limits();

}  // namespace mantissa

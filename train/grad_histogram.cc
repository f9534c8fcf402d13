// Gradient histograms: one pass over the grads, split over the threads, buckets log2|g| and the finite
// values as it reads them; each element's bucket is computed from its log2 rather than searched for.
#include "train/grad_histogram.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <utility>

#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/parallel.h"

namespace mantissa {
namespace {

// log2|g| buckets are this wide: fine enough to show the shape of a distribution that spans tens of
// binades, with 2^-24 and 2^-14 (fp16's subnormal and normal limits) on bucket edges. Their limits run from
// -149 (the bucket of the smallest float, 2^-149) to 128 (the largest float is just below 2^128).
constexpr double kLog2BucketWidth = 0.5, kLog2FirstLimit = -149.0, kLog2LastLimit = 128.0;

std::vector<double> log2_bucket_limits() {
  std::vector<double> limits;
  for (double limit = kLog2FirstLimit; limit <= kLog2LastLimit; limit += kLog2BucketWidth) limits.push_back(limit);
  return limits;
}

// TensorFlow's default limits: 0 and +-kFirst * kGrowth^k below kEnd in magnitude.
constexpr double kFirst = 1e-12, kGrowth = 1.1, kEnd = 1e20;

// The number of positive limits below kEnd (the index of 0 in default_bucket_limits()).
size_t default_positive_limits() { return (default_bucket_limits().size() - 2) / 2; }

// An index at or next to v's bucket in default_bucket_limits(), from log2|v|: the positive limit p_k closing
// v's bucket has k = ceil(log(v / kFirst) / log(kGrowth)); for a negative v the bucket is closed by -p_j for
// the largest p_j <= |v|. The limits were made by repeated multiplication, so this can be one off; add()
// walks the rest.
size_t default_bucket_near(double v, double log2_abs) {
  const auto zero = static_cast<double>(default_positive_limits());
  if (v == 0.0) return static_cast<size_t>(zero);
  static const double log2_first = std::log2(kFirst), per_log2 = 1.0 / std::log2(kGrowth);
  const double k = (log2_abs - log2_first) * per_log2;
  const double index = v > 0 ? zero + 1 + std::ceil(k) : zero - 1 - std::floor(k);
  return static_cast<size_t>(std::clamp(index, 0.0, 2 * zero + 1));
}

// The log2|g| bucket of x = log2|g|: limits are kLog2FirstLimit + i * width, so i = ceil((x - first) / width).
size_t log2_bucket(double x) {
  const double i = std::ceil((x - kLog2FirstLimit) / kLog2BucketWidth);
  return static_cast<size_t>(std::clamp(i, 0.0, (kLog2LastLimit - kLog2FirstLimit) / kLog2BucketWidth));
}

// The histograms of a run of elements, to be merged with the others in order.
struct Part {
  HistogramBuilder log2_abs{log2_bucket_limits()};
  HistogramBuilder values{default_bucket_limits()};
  int64_t zeros = 0, nonfinite = 0;

  void add(const float* data, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const double v = data[i];
      if (!std::isfinite(v)) {
        ++nonfinite;
        continue;
      }
      if (v == 0.0) {
        ++zeros;
        values.add(v, default_bucket_near(v, 0.0));
        continue;
      }
      const double x = std::log2(std::fabs(v));
      log2_abs.add(x, log2_bucket(x));
      values.add(v, default_bucket_near(v, x));
    }
  }
  void merge(const Part& other) {
    log2_abs.merge(other.log2_abs);
    values.merge(other.values);
    zeros += other.zeros;
    nonfinite += other.nonfinite;
  }
};

// Elements per thread below which a grad is read by one thread.
constexpr int64_t kGrain = 1 << 16;

}  // namespace

const std::vector<double>& default_bucket_limits() {
  static const std::vector<double>* limits = [] {
    std::vector<double> positive;
    for (double v = kFirst; v < kEnd; v *= kGrowth) positive.push_back(v);
    auto* all = new std::vector<double>;
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) all->push_back(-*it);
    all->push_back(0.0);
    all->insert(all->end(), positive.begin(), positive.end());
    all->push_back(std::numeric_limits<double>::max());
    return all;
  }();
  return *limits;
}

HistogramBuilder::HistogramBuilder(std::vector<double> limits)
    : limits_(std::move(limits)), counts_(limits_.size(), 0.0) {
  MT_ASSERT(!limits_.empty() && std::is_sorted(limits_.begin(), limits_.end()),
            "HistogramBuilder: the limits must be increasing");
  totals_.min = std::numeric_limits<double>::infinity();
  totals_.max = -totals_.min;
}

void HistogramBuilder::add(double v) {
  // The first limit >= v closes v's bucket.
  const auto at = std::lower_bound(limits_.begin(), limits_.end(), v);
  count(v, std::min<size_t>(static_cast<size_t>(at - limits_.begin()), limits_.size() - 1));
}

void HistogramBuilder::add(double v, size_t near) {
  size_t i = std::min(near, limits_.size() - 1);
  while (i > 0 && limits_[i - 1] >= v) --i;
  while (i + 1 < limits_.size() && limits_[i] < v) ++i;
  count(v, i);
}

void HistogramBuilder::count(double v, size_t bucket) {
  totals_.min = std::min(totals_.min, v);
  totals_.max = std::max(totals_.max, v);
  totals_.num += 1;
  totals_.sum += v;
  totals_.sum_squares += v * v;
  counts_[bucket] += 1;
}

void HistogramBuilder::merge(const HistogramBuilder& other) {
  MT_ASSERT(other.limits_ == limits_, "HistogramBuilder::merge: the builders have different limits");
  totals_.min = std::min(totals_.min, other.totals_.min);
  totals_.max = std::max(totals_.max, other.totals_.max);
  totals_.num += other.totals_.num;
  totals_.sum += other.totals_.sum;
  totals_.sum_squares += other.totals_.sum_squares;
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
}

tensorboard::Histogram HistogramBuilder::finish() const {
  if (totals_.num == 0) return {};
  tensorboard::Histogram h = totals_;
  size_t first = 0, last = counts_.size() - 1;
  while (counts_[first] == 0) ++first;
  while (counts_[last] == 0) --last;
  h.bucket_limit.assign(limits_.begin() + static_cast<std::ptrdiff_t>(first),
                        limits_.begin() + static_cast<std::ptrdiff_t>(last) + 1);
  h.bucket.assign(counts_.begin() + static_cast<std::ptrdiff_t>(first),
                  counts_.begin() + static_cast<std::ptrdiff_t>(last) + 1);
  return h;
}

tensorboard::Histogram histogram(std::span<const double> values, std::vector<double> limits) {
  HistogramBuilder builder(std::move(limits));
  for (double v : values) builder.add(v);
  return builder.finish();
}

GradientHistograms gradient_histograms(std::span<const NamedTensor> params) {
  NoGradGuard no_grad;
  GradientHistograms out;
  Part total;
  for (const NamedTensor& p : params) {
    const Tensor& grad = p.tensor.grad();
    if (!grad.defined()) continue;
    const Tensor g = grad.detach().to(kCPU).to(DType::kF32).contiguous();
    const float* data = g.data<float>();
    const int64_t n = g.numel();
    out.elements += n;
    // Each thread's part is merged in the order of its first element, so that the sums do not depend on
    // which thread finishes first.
    std::map<int64_t, Part> parts;
    std::mutex mutex;
    parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      Part part;
      part.add(data + begin, end - begin);
      std::lock_guard<std::mutex> lock(mutex);
      parts.emplace(begin, std::move(part));
    });
    for (const auto& [begin, part] : parts) total.merge(part);
  }
  if (out.elements > 0) {
    out.zero_fraction = static_cast<double>(total.zeros) / static_cast<double>(out.elements);
    out.nonfinite_fraction = static_cast<double>(total.nonfinite) / static_cast<double>(out.elements);
  }
  out.log2_abs = total.log2_abs.finish();
  out.values = total.values.finish();
  return out;
}

}  // namespace mantissa

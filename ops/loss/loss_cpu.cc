// Cross-entropy, nll and squared-error kernels. Positions (batch x inner) are independent and split
// over threads; the class axis is walked with stride `inner` (1 for the common [N, C] case).
#include "ops/loss/loss_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "framework/parallel.h"
#include "ops/softmax/softmax_cpu.h"

namespace mantissa::cpu {
namespace {

// Calls f(p, base) for every position p = b * inner + j; base = b * classes * inner + j is the offset of
// class 0 of that position in the [batch, classes, inner] input.
template <typename F>
void for_each_position(ClassGeometry g, F&& f) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.classes));
  parallel_for(g.positions(), grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t b = p / g.inner, j = p % g.inner;
      f(p, b * g.classes * g.inner + j);
    }
  });
}

}  // namespace

template <typename T>
void cross_entropy_forward(const T* logits, const int64_t* target, ClassGeometry g, int64_t ignore_index,
                           compute_t<T>* loss, compute_t<T>* lse) {
  using C = compute_t<T>;
  const int64_t s = g.inner;
  for_each_position(g, [&](int64_t p, int64_t base) {
    const T* x = logits + base;
    C m = -std::numeric_limits<C>::infinity();
    for (int64_t c = 0; c < g.classes; ++c) m = std::max(m, static_cast<C>(x[c * s]));
    C sum = 0;
    for (int64_t c = 0; c < g.classes; ++c) sum += exp_compute<C>(static_cast<C>(x[c * s]) - m);
    const C ls = std::log(sum);
    lse[p] = m + ls;
    const int64_t t = target[p];
    // log(sum) - (x[t] - m) keeps the low bits that m + log(sum) - x[t] would lose for large logits.
    loss[p] = t == ignore_index ? C(0) : ls - (static_cast<C>(x[t * s]) - m);
  });
}

template <typename T>
void cross_entropy_backward(const T* logits, const int64_t* target, const compute_t<T>* lse, const compute_t<T>* scale,
                            ClassGeometry g, int64_t ignore_index, T* dlogits) {
  using C = compute_t<T>;
  const int64_t s = g.inner;
  for_each_position(g, [&](int64_t p, int64_t base) {
    const T* x = logits + base;
    T* dx = dlogits + base;
    const int64_t t = target[p];
    if (t == ignore_index) {
      for (int64_t c = 0; c < g.classes; ++c) dx[c * s] = T(0);
      return;
    }
    const C k = scale[p], l = lse[p];
    for (int64_t c = 0; c < g.classes; ++c) {
      const C prob = exp_compute<C>(static_cast<C>(x[c * s]) - l);
      dx[c * s] = static_cast<T>((prob - (c == t ? C(1) : C(0))) * k);
    }
  });
}

template <typename T>
void nll_forward(const T* log_probs, const int64_t* target, ClassGeometry g, int64_t ignore_index, compute_t<T>* loss) {
  using C = compute_t<T>;
  for_each_position(g, [&](int64_t p, int64_t base) {
    const int64_t t = target[p];
    loss[p] = t == ignore_index ? C(0) : -static_cast<C>(log_probs[base + t * g.inner]);
  });
}

template <typename T>
void nll_backward(const int64_t* target, const compute_t<T>* scale, ClassGeometry g, int64_t ignore_index,
                  T* dlog_probs) {
  for_each_position(g, [&](int64_t p, int64_t base) {
    for (int64_t c = 0; c < g.classes; ++c) dlog_probs[base + c * g.inner] = T(0);
    const int64_t t = target[p];
    if (t != ignore_index) dlog_probs[base + t * g.inner] = static_cast<T>(-scale[p]);
  });
}

template <typename T>
double squared_error_sum(const T* a, const T* b, int64_t n) {
  // Per-thread partial sums, added in thread order so the result does not depend on timing.
  const int threads = n < 65536 ? 1 : std::max(1, num_threads());
  std::vector<double> partial(static_cast<size_t>(threads), 0.0);
  const int64_t chunks = static_cast<int64_t>(partial.size());
  parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t lo = n * k / chunks, hi = n * (k + 1) / chunks;
      double acc = 0;
      for (int64_t i = lo; i < hi; ++i) {
        const double d =
            static_cast<double>(static_cast<compute_t<T>>(a[i])) - static_cast<double>(static_cast<compute_t<T>>(b[i]));
        acc += d * d;
      }
      partial[static_cast<size_t>(k)] = acc;
    }
  });
  double total = 0;
  for (double v : partial) total += v;
  return total;
}

#define MT_INSTANTIATE_(T)                                                                                    \
  template void cross_entropy_forward<T>(const T*, const int64_t*, ClassGeometry, int64_t, compute_t<T>*,     \
                                         compute_t<T>*);                                                      \
  template void cross_entropy_backward<T>(const T*, const int64_t*, const compute_t<T>*, const compute_t<T>*, \
                                          ClassGeometry, int64_t, T*);                                        \
  template void nll_forward<T>(const T*, const int64_t*, ClassGeometry, int64_t, compute_t<T>*);              \
  template void nll_backward<T>(const int64_t*, const compute_t<T>*, ClassGeometry, int64_t, T*);             \
  template double squared_error_sum<T>(const T*, const T*, int64_t)
MT_INSTANTIATE_(float);
MT_INSTANTIATE_(double);
MT_INSTANTIATE_(Half);
MT_INSTANTIATE_(BFloat16);
#undef MT_INSTANTIATE_

}  // namespace mantissa::cpu

// Loss kernels over raw pointers. Class-index losses see the input as [batch, classes, inner]
// (contiguous; inner = the product of the trailing dims d1..., 1 for [N, C]) and the target as
// [batch, inner] int64 class indices already checked to lie in [0, classes) or equal ignore_index.
// Per-position values are written in the compute type C (float for f32/f16/bf16, double for f64).
#pragma once

#include <cstdint>

#include "framework/dtype.h"

namespace mantissa::cpu {

struct ClassGeometry {
  int64_t batch = 1;
  int64_t classes = 1;
  int64_t inner = 1;
  int64_t positions() const { return batch * inner; }
};

// Fused log_softmax + nll: loss[p] = logsumexp(x[p, :]) - x[p, target[p]] (0 where ignored), and the
// logsumexp itself, kept for backward.
template <typename T>
void cross_entropy_forward(const T* logits, const int64_t* target, ClassGeometry g, int64_t ignore_index,
                           compute_t<T>* loss, compute_t<T>* lse);

// dlogits[p, c] = (exp(x[p, c] - lse[p]) - [c == target[p]]) * scale[p]; zero rows where ignored.
template <typename T>
void cross_entropy_backward(const T* logits, const int64_t* target, const compute_t<T>* lse,
                            const compute_t<T>* scale, ClassGeometry g, int64_t ignore_index, T* dlogits);

// loss[p] = -log_probs[p, target[p]] (0 where ignored).
template <typename T>
void nll_forward(const T* log_probs, const int64_t* target, ClassGeometry g, int64_t ignore_index,
                 compute_t<T>* loss);

// dlog_probs = -scale[p] at [p, target[p]], zero elsewhere.
template <typename T>
void nll_backward(const int64_t* target, const compute_t<T>* scale, ClassGeometry g, int64_t ignore_index,
                  T* dlog_probs);

// sum((a - b)^2) over n contiguous elements, accumulated in double.
template <typename T>
double squared_error_sum(const T* a, const T* b, int64_t n);

}  // namespace mantissa::cpu

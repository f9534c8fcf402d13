// Loss kernels over raw pointers. Class-index losses see the input as [batch, classes, inner]
// (contiguous; inner = the product of the trailing dims d1..., 1 for [N, C]) and the target as
// [batch, inner] int64 class indices already checked to lie in [0, classes) or equal ignore_index.
// Per-position values are written in the compute type C (float for f32/f16/bf16, double for f64).
#pragma once

#include <cstdint>

#include "framework/dtype.h"
#include "framework/tensor.h"
#include "ops/loss/loss.h"

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
void cross_entropy_backward(const T* logits, const int64_t* target, const compute_t<T>* lse, const compute_t<T>* scale,
                            ClassGeometry g, int64_t ignore_index, T* dlogits);

// loss[p] = -log_probs[p, target[p]] (0 where ignored).
template <typename T>
void nll_forward(const T* log_probs, const int64_t* target, ClassGeometry g, int64_t ignore_index, compute_t<T>* loss);

// dlog_probs = -scale[p] at [p, target[p]], zero elsewhere.
template <typename T>
void nll_backward(const int64_t* target, const compute_t<T>* scale, ClassGeometry g, int64_t ignore_index,
                  T* dlog_probs);

// sum((a - b)^2) over n contiguous elements, accumulated in double.
template <typename T>
double squared_error_sum(const T* a, const T* b, int64_t n);

// The plan of a class-index loss, shared with the CUDA kernels (ops/loss/loss_cuda.h): the checked
// operands and their [batch, classes, inner] geometry.
struct ClassPlan {
  Tensor input;      // contiguous
  Tensor target;     // contiguous i64
  Shape loss_shape;  // the per-position shape (kNone's output): target's shape
  ClassGeometry geometry;
  int64_t count = 0;  // positions whose target is not ignore_index (CPU targets; 0 for device ones)
};

// A class-index loss's forward: the loss, and what its backward needs besides the plan.
struct ClassLossForward {
  Tensor out;
  Tensor lse;           // cross_entropy: [positions] logsumexp in the compute dtype (f32, f64 for f64)
  Tensor device_count;  // CUDA: f64 scalar count of non-ignored targets, kept on the device
};

// What the backward of cross_entropy and nll_loss reads, unpacked from their nodes.
struct ClassLossSaved {
  Tensor logits;        // cross_entropy: contiguous logits
  Tensor target;        // contiguous i64
  Tensor lse;           // cross_entropy
  Tensor device_count;  // CUDA
  int64_t count = 0;    // CPU
  Shape input_shape;    // nll_loss: the gradient's shape and dtype
  DType input_dtype = DType::kF32;
  ClassGeometry geometry;
  CrossEntropyOptions options;
};

}  // namespace mantissa::cpu

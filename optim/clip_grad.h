// Gradient clipping over a set of parameters: clip_grad_norm_ (total norm accumulated in f64) and
// clip_grad_value_, as torch.nn.utils with error_if_nonfinite=false, except where a non-finite norm is found
// (see below). Parameters without a grad are ignored.
#pragma once

#include <vector>

#include "framework/module.h"

namespace mantissa {

enum class NormType { kL2, kInf };

// Scales every grad by max_norm / (total + 1e-6) when that is below 1, where total is the norm of all the
// grads together, and returns total. The sum of squares (or the max) is accumulated in f64 in a fixed order
// (optim/norm_order.h), so the result does not depend on the thread count or, on a GPU, on the launch
// geometry, and GPU grads are written to give the same bits as the same grads on the CPU (not yet run on a
// GPU); the coefficient is computed in f64 and rounded once to the grads' dtype (PyTorch computes both in the
// grads' dtype, so the scaled grads may differ by an ulp). A non-finite total (an inf or nan grad, or an f64
// overflow) is returned and the grads are left untouched: PyTorch would multiply them by 0 or nan; leaving
// them lets the GradScaler see the inf and skip the step. Check std::isfinite on the result if you clip
// without a scaler. No grads: 0. GPU grads: returning the total is one synchronization
// (enqueue_clip_grad_norm_ below has none).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, NormType norm_type = NormType::kL2);
double clip_grad_norm_(const std::vector<NamedTensor>& params, double max_norm, NormType norm_type = NormType::kL2);

// The same rule without a host read: the total norm comes back as an f64 scalar tensor on the grads' device
// (a CPU tensor when there are none), and the coefficient is decided on the device, so the grads are
// scaled, or left alone, by work queued on the current stream behind the total. On a GPU that is a handful
// of launches however many grads there are (optim/cuda/clip_kernels.cu): a multi-tensor pass writes f64
// partials of every grad, one block adds them into the total and the coefficient, and a multi-tensor pass
// scales the grads, returning at once when the coefficient is not below 1. Read the total later (one
// step behind, or after an event) to keep the host ahead of the GPU; clip_grad_norm_ is this call and
// total.item(). On the CPU the work is done when it returns.
Tensor enqueue_clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, NormType norm_type = NormType::kL2);
Tensor enqueue_clip_grad_norm_(const std::vector<NamedTensor>& params, double max_norm,
                               NormType norm_type = NormType::kL2);

// Clamps every grad element to [-clip_value, clip_value]; nan stays nan (as torch.clamp).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);
void clip_grad_value_(const std::vector<NamedTensor>& params, double clip_value);

}  // namespace mantissa

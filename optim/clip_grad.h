// Gradient clipping over a set of parameters: clip_grad_norm_ (total norm accumulated in f64) and
// clip_grad_value_, as torch.nn.utils with error_if_nonfinite=false, except where a non-finite norm is found
// (see below). Parameters without a grad are ignored.
#pragma once

#include <functional>
#include <span>
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

// clip_grad_norm_ over grads whose elements are spread over ranks (ZeRO-1, train/zero.h), with the bits the
// whole grads would give. `sizes` are the whole parameters' element counts, in the order the unsharded call
// would take them; this rank holds `slices`, each the elements [begin, begin + grad.numel()) of parameter
// `param` (an index into `sizes`) as a contiguous CPU f32 or f64 grad, with begin a multiple of
// norm_order::kBlock and the end a multiple of it or the parameter's end, so that a slice's blocks are the
// whole parameter's. The f64 list of every block's partial is filled with this rank's and zeros elsewhere,
// and `sum_over_ranks` must add the ranks' lists in place (adding zeros changes no bit, so every rank then
// holds the unsharded list); the total and the rule are then clip_grad_norm_'s, applied to the slices.
struct GradSlice {
  Tensor grad;
  size_t param = 0;
  int64_t begin = 0;
};
Tensor clip_sharded_grad_norm_(std::span<const GradSlice> slices, std::span<const int64_t> sizes, double max_norm,
                               NormType norm_type, const std::function<void(const Tensor&)>& sum_over_ranks);

// Clamps every grad element to [-clip_value, clip_value]; nan stays nan (as torch.clamp).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);
void clip_grad_value_(const std::vector<NamedTensor>& params, double clip_value);

}  // namespace mantissa

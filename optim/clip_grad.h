// Gradient clipping over a set of parameters: clip_grad_norm_ (total norm accumulated in f64) and
// clip_grad_value_, as torch.nn.utils with error_if_nonfinite=false, except where a non-finite norm is found
// (see below). Parameters without a grad are ignored.
#pragma once

#include <vector>

#include "framework/module.h"

namespace mantissa {

enum class NormType { kL2, kInf };

// Scales every grad by max_norm / (total + 1e-6) when that is below 1, where total is the norm of all the
// grads together, and returns total. The sum of squares (or the max) is accumulated in f64 in a fixed order,
// so the result does not depend on the thread count; the coefficient is computed in f64 and rounded once to
// the grads' dtype (PyTorch computes both in the grads' dtype, so the scaled grads may differ by an ulp).
// A non-finite total (an inf or nan grad, or an f64 overflow) is returned and the grads are left
// untouched: PyTorch would multiply them by 0 or nan; leaving them lets the GradScaler see the inf and skip
// the step. Check std::isfinite on the result if you clip without a scaler. GPU grads: each grad's part is
// reduced on the device in f32 and the parts added in f64; returning the total is one synchronization.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, NormType norm_type = NormType::kL2);
double clip_grad_norm_(const std::vector<NamedTensor>& params, double max_norm, NormType norm_type = NormType::kL2);

// Clamps every grad element to [-clip_value, clip_value]; nan stays nan (as torch.clamp).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);
void clip_grad_value_(const std::vector<NamedTensor>& params, double clip_value);

}  // namespace mantissa

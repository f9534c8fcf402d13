// The passes the GradScaler runs over the grads of an optimizer's parameters: unscale_grads_ (PyTorch's
// _amp_foreach_non_finite_check_and_unscale_: check, then g *= inv_scale) and check_grads_finite_ (the
// check alone, reading the grads only, for the fused Optimizer::step(GradScaling)). inv_scale and found_inf
// are f32 scalar tensors; found_inf is set to 1 when a grad holds an inf or nan (checked before scaling, as
// PyTorch does) and never reset here. (The GradScaler itself, which drives them, is amp/grad_scaler.h.)
#pragma once

#include "framework/tensor.h"
#include "optim/optimizer.h"

namespace mantissa {

void unscale_grads_(const Optimizer& optimizer, const Tensor& inv_scale, const Tensor& found_inf);
void check_grads_finite_(const Optimizer& optimizer, const Tensor& found_inf);

}  // namespace mantissa

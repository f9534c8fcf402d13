// Normalization layers (PyTorch semantics): layer_norm over the trailing normalized_shape, and
// batch_norm over the channel dim 1 of [N, C] or [N, C, H, W] with training/eval modes and running
// statistics. Both are fused kernels with a hand-written backward for x, weight and bias. group_norm is
// composed from layer_norm.
#pragma once

#include "framework/tensor.h"
#include "ops/op.h"

namespace mantissa {

MT_OP(layer_norm, kNone, kFp32);
// y = (x - mean) / sqrt(var + eps) * weight + bias, statistics (biased var) over the last
// normalized_shape.size() dims of x, which must equal normalized_shape. weight and bias are
// normalized_shape or undefined (1 and 0).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// A residual add and the layer_norm after it (a transformer block's x + f(x), then ln_2), as one op:
// sum = x + delta, out = layer_norm(sum, ...). On the CPU one pass over each row adds (as add: delta
// widened, one rounding to sum's dtype) and normalizes the row while it is in cache; both results equal
// the two ops' bit for bit, and their backward is the two ops' (an add node and layer_norm's). x and
// delta must have one shape; delta may be f16/bf16 under an f32 x (autocast's residual stream), else the
// dtypes match. CUDA tensors run the two ops. Autocast: as the two ops (layer_norm casts on CUDA only).
struct AddLayerNorm {
  Tensor sum, out;
};
AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& delta, const Shape& normalized_shape,
                            const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), double eps = 1e-5);

MT_OP(group_norm, kNone, kFp32);
// x [N, C, *] normalized over each of `groups` channel groups (C/groups channels and all of *), then
// weight [C] and bias [C] (or undefined) per channel. Composed from layer_norm (its backward), in fp32
// for 16-bit inputs and rounded once.
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

enum class BatchNormMode { kTrain, kEval };
// kTrain normalizes with batch statistics (biased var) and updates running_mean/var in place (unbiased
// var): running = (1 - momentum) * running + momentum * batch, as torch; running stats may be undefined
// (then nothing is tracked). kEval normalizes with running_mean/var, which must be given. weight, bias,
// running_mean and running_var are [C] (or undefined), in x's dtype or f32.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, BatchNormMode mode, double momentum = 0.1, double eps = 1e-5);

// relu(max_pool2d(batch_norm(x), kernel 2x2, stride 2)) over x [N, C, H, W] as one op (a CNN block's tail
// after its convolution; the output is [N, C, H / 2, W / 2]), with batch_norm's modes, running updates and
// arguments. On the CPU one kernel normalizes, pools and rectifies without writing the normalized tensor,
// and the backward sums over the pooled grid and writes dx in one pass; the forward equals the three ops
// bit for bit, the backward to rounding (its channel sums skip the zeros). create_graph is refused (no
// double backward). CUDA tensors are written to run the three ops (no fused CUDA kernel yet; never run).
Tensor batch_norm_relu_pool2d(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                              const Tensor& weight, const Tensor& bias, BatchNormMode mode, double momentum = 0.1,
                              double eps = 1e-5);

}  // namespace mantissa

// sync_batch_norm composed from differentiable ops around one differentiable all-reduce, so that its
// backward (which needs the all-reduce of the per-channel gradient sums) is autograd's; and the conversion
// of a model's BatchNorm2d layers. tests/models/sync_batch_norm_test.cc checks it against BatchNorm2d in a
// world of one, tests/dist/batchnorm_dist.cc against one process of the global batch.
#include "models/layers/sync_batch_norm.h"

#include <unordered_set>
#include <vector>

#include "framework/autograd.h"
#include "framework/error.h"
#include "models/layers/norm.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"

namespace mantissa {
namespace {

struct AllReduceSumBackward final : Node {
  ProcessGroup* group = nullptr;
  std::string_view name() const override { return "AllReduceSumBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    // An undefined gradient is a zero one, and still takes part: the other ranks wait in this collective.
    const OutputInfo& out = outputs[0];
    Tensor g = zeros(out.shape, {.dtype = out.dtype, .device = out.device});
    if (grads[0].defined()) copy_(g, grads[0]);
    group->all_reduce(g, ReduceOp::kSum);
    return {g};
  }
};

void check_per_channel(const Tensor& p, const Tensor& x, const char* what) {
  if (!p.defined()) return;
  MT_CHECK(p.dim() == 1 && p.size(0) == x.size(1) && is_floating(p.dtype()) && p.device() == x.device(),
           "sync_batch_norm: ", what, " must be a floating [", x.size(1), "] tensor on ", x.device().str(),
           " for input ", shape_str(x.shape()), ", got ", dtype_name(p.dtype()), shape_str(p.shape()), " on ",
           p.device().str());
}

// running = (1 - momentum) * running + momentum * batch, in place, computed in f64 and stored once (as
// batch_norm's own update).
void update_running(const Tensor& running, const Tensor& batch, double momentum) {
  const Tensor next = add(mul(running.detach().to(DType::kF64), 1.0 - momentum), mul(batch.to(DType::kF64), momentum));
  copy_(running, next);
}

}  // namespace

Tensor all_reduce_sum(const Tensor& x, ProcessGroup& group) {
  MT_CHECK(x.defined(), "all_reduce_sum: the tensor is undefined");
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  copy_(out, x.detach());
  group.all_reduce(out, ReduceOp::kSum);
  if (compute_requires_grad({&x})) {
    auto node = make_node<AllReduceSumBackward>({&x});
    node->group = &group;
    set_history(out, node);
  }
  return out;
}

Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, ProcessGroup& group, double momentum, double eps) {
  MT_CHECK(x.defined(), "sync_batch_norm: input is undefined");
  MT_CHECK(x.dim() >= 2 && is_floating(x.dtype()), "sync_batch_norm: expected a floating input [N, C, *], got ",
           dtype_name(x.dtype()), shape_str(x.shape()));
  check_per_channel(weight, x, "weight");
  check_per_channel(bias, x, "bias");
  check_per_channel(running_mean, x, "running_mean");
  check_per_channel(running_var, x, "running_var");
  MT_CHECK(running_mean.defined() == running_var.defined(),
           "sync_batch_norm: give both running_mean and running_var, or neither");
  const int64_t channels = x.size(1);
  const int64_t count = channels == 0 ? 0 : x.numel() / channels;  // this rank's values per channel
  // Other ranks' counts are known only after the collective; a world of one can refuse at once, as
  // batch_norm does (PyTorch's SyncBatchNorm checks the same).
  MT_CHECK(group.size() > 1 || count > 1, "sync_batch_norm: training needs more than one value per channel, got ",
           "input ", shape_str(x.shape()), ". HINT: use a batch larger than 1");

  // f32 whatever the input dtype (f64 stays f64), as batch_norm computes its statistics. Dims reduced: all
  // but the channel dim 1; per_channel views a [C] tensor as [1, C, 1, ...] to broadcast over x.
  const DType cd = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  const TensorOptions options{.dtype = cd, .device = x.device()};
  Shape dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Shape per_channel(static_cast<size_t>(x.dim()), 1);
  per_channel[1] = channels;
  const Tensor xf = x.to(cd);

  // This rank's statistics per channel [3, C]: the count (exact in f32 up to 2^24 values per channel), the
  // mean, and M2, the sum of squared deviations from that mean (var subtracts the mean before squaring).
  // A rank with an empty batch contributes zeros that still depend on x (an empty sum), so that its graph
  // holds the backward's all-reduce as the other ranks' graphs do.
  const Tensor local_mean = count > 0 ? mean(xf, dims) : sum(xf, dims);
  const Tensor local_m2 = count > 0 ? mul(var(xf, dims, {.correction = 0}), static_cast<double>(count)) : sum(xf, dims);
  const Tensor stats = stack({full({channels}, static_cast<double>(count), options), local_mean, local_m2});

  // Every rank's statistics in one collective [W, 3, C]: a sum to which each rank adds its own row and
  // zeros elsewhere (an all-gather whose backward, the all-reduce of the gradient, autograd already has).
  const int world = group.size(), rank = group.rank();
  std::vector<Tensor> rows;
  if (rank > 0) rows.push_back(zeros({rank, 3, channels}, options));
  rows.push_back(stats.unsqueeze(0));
  if (rank + 1 < world) rows.push_back(zeros({world - rank - 1, 3, channels}, options));
  const Tensor all = all_reduce_sum(rows.size() == 1 ? rows[0] : cat(rows, 0), group);
  const Tensor counts = all.select(1, 0), means = all.select(1, 1), m2s = all.select(1, 2);  // [W, C]

  // Merged (Chan, Golub and LeVeque): n = sum n_r, mean = sum n_r mean_r / n, and
  // M2 = sum M2_r + sum n_r (mean_r - mean)^2: only deviations are squared, so no cancellation.
  const Tensor total = sum(counts, {0});
  const Tensor global_mean = div(sum(mul(counts, means), {0}), total);
  const Tensor deviation = sub(means, global_mean);
  const Tensor m2 = add(sum(m2s, {0}), sum(mul(counts, mul(deviation, deviation)), {0}));
  const Tensor invstd = rsqrt(add(div(m2, total), eps));  // biased variance for the normalisation

  const Tensor scale = weight.defined() ? mul(invstd, weight.to(cd)) : invstd;
  Tensor y = mul(sub(xf, global_mean.reshape(per_channel)), scale.reshape(per_channel));
  if (bias.defined()) y = add(y, bias.to(cd).reshape(per_channel));
  if (running_mean.defined()) {
    NoGradGuard no_grad;
    update_running(running_mean, global_mean.detach(), momentum);
    update_running(running_var, div(m2.detach(), sub(total.detach(), 1.0)), momentum);  // unbiased
  }
  return y.to(x.dtype());
}

int64_t convert_sync_batchnorm(Module& model, ProcessGroup& group) {
  int64_t converted = 0;
  std::unordered_set<const Module*> seen;  // a module shared by two parents is converted once
  std::vector<Module*> pending{&model};
  while (!pending.empty()) {
    Module* m = pending.back();
    pending.pop_back();
    if (!seen.insert(m).second) continue;
    if (auto* bn = dynamic_cast<BatchNorm2d*>(m)) {
      bn->options.process_group = &group;
      ++converted;
    }
    for (const auto& [name, child] : m->named_children()) pending.push_back(child.get());
  }
  return converted;
}

}  // namespace mantissa

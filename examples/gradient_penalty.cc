// The gradient penalty recipe of PyTorch's AMP examples in C++: the gradients of the SCALED loss with
// respect to the parameters, with create_graph, unscaled by hand (a plain division: they belong to no
// optimizer, so scaler.unscale_ does not apply); the norm of the unscaled gradients added to the loss; then
// the scaled total's backward through everything, a second-order backward; step and update as usual.
// A small MLP on synthetic data, run once in f16 and once in bf16 under autocast.
// Usage: gradient_penalty [STEPS]
// It checks what the recipe promises and exits 1 when a check fails: every applied step had a finite loss
// and penalty, the loss falls, and the hand-unscaled gradient equals the gradient of the unscaled loss.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "framework/autograd.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "optim/adam.h"

using namespace mantissa;

namespace {

constexpr int64_t kSamples = 512, kFeatures = 16, kClasses = 4, kBatch = 64;

// Inputs x [kSamples, kFeatures] and the class a fixed random linear map scores highest for each.
struct Data {
  Tensor x, y;
};
Data synthetic_data() {
  Generator gen(7);
  const Tensor x = randn({kSamples, kFeatures}, {}, &gen);
  const Tensor teacher = randn({kFeatures, kClasses}, {}, &gen);
  return {x, argmax(matmul(x, teacher), 1)};
}

// The largest |a - b| over all parameters, relative to the largest |b|.
double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, max(abs(a[i] - b[i])).item());
    scale = std::max(scale, max(abs(b[i])).item());
  }
  return diff / scale;
}

// Trains for `steps` steps in `precision`; returns whether every check passed.
bool train(DType precision, int64_t steps, const Data& data) {
  const char* name = precision == DType::kF16 ? "f16" : "bf16";
  Generator init(1);
  MLP model(kFeatures, {32}, kClasses, {.generator = &init});
  Adam optimizer(model.named_parameters(), {.lr = 1e-2});
  // f16 needs the scaler; bf16 does not (fp32's exponent range), but enabling it there too runs the same
  // recipe, unscale by hand included, in both precisions.
  amp::GradScalerOptions scaler_options = amp::scaler_defaults_for(precision);
  scaler_options.state = amp::ScalerState::kEnabled;
  amp::GradScaler scaler(scaler_options);
  const std::vector<Tensor> params = model.parameters();

  bool ok = true;
  double first_losses = 0, last_losses = 0, worst_unscale_error = 0;
  const int64_t window = std::max<int64_t>(1, steps / 10);  // steps averaged at the start and at the end
  int64_t skipped = 0;
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t start = (step * kBatch) % kSamples;
    const Tensor x = data.x.slice(0, start, start + kBatch), y = data.y.slice(0, start, start + kBatch);
    optimizer.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast({.dtype = precision});
      loss = cross_entropy(model.forward(x), y);
    }

    // The gradients of the scaled loss, with their own graph (create_graph), unscaled by hand.
    const std::vector<Tensor> scaled_grads = grad(scaler.scale(loss), params, {.create_graph = true});
    const double inv_scale = 1.0 / scaler.get_scale();
    std::vector<Tensor> grads;
    for (const Tensor& g : scaled_grads) grads.push_back(g * inv_scale);

    // The recipe's promise: these are the gradients of the loss itself. Checked now and then against a
    // plain grad() of the unscaled loss (after the create_graph pass, which kept the graph).
    if (step % 10 == 0) {
      const std::vector<Tensor> plain = grad(loss, params, {.retain_graph = true});
      worst_unscale_error = std::max(worst_unscale_error, max_relative_difference(grads, plain));
    }

    Tensor penalty;
    {
      amp::AutocastGuard autocast({.dtype = precision});
      Tensor norm2 = zeros({});
      for (const Tensor& g : grads) norm2 = norm2 + sum(pow(g, 2.0));
      penalty = sqrt(norm2);
    }
    const Tensor total = loss + penalty;

    // Scaled as usual: the backward runs through the penalty's graph too, so the leaves' gradients are
    // those of loss + penalty, scaled, and step() unscales them.
    scaler.scale(total).backward();
    const bool applied = scaler.step(optimizer);
    scaler.update();

    const double loss_value = loss.item(), penalty_value = penalty.item();
    if (!applied) {
      ++skipped;
    } else if (!std::isfinite(loss_value) || !std::isfinite(penalty_value)) {
      std::fprintf(stderr, "%s step %lld: an applied step had loss %g and penalty %g\n", name,
                   static_cast<long long>(step), loss_value, penalty_value);
      ok = false;
    }
    if (step < window) first_losses += loss_value / static_cast<double>(window);
    if (step >= steps - window) last_losses += loss_value / static_cast<double>(window);
    if (step % 50 == 0 || step == steps - 1) {
      std::printf("%s step %4lld: loss %.4f, penalty %.4f, scale %g%s\n", name, static_cast<long long>(step),
                  loss_value, penalty_value, scaler.get_scale(), applied ? "" : " (skipped)");
    }
  }

  std::printf(
      "%s: mean loss %.4f over the first %lld steps, %.4f over the last; %lld skipped; "
      "hand-unscaled gradient within %.2g of the plain one\n",
      name, first_losses, static_cast<long long>(window), last_losses, static_cast<long long>(skipped),
      worst_unscale_error);
  if (!(last_losses < 0.5 * first_losses)) {
    std::fprintf(stderr, "%s: the loss did not fall by half\n", name);
    ok = false;
  }
  // A power-of-two scale changes no rounding until a value underflows (the unscaled f16 backward loses its
  // smallest gradients: what the scaler is for) or overflows; and the create_graph formulas (composed ops,
  // not the fused kernels) may round an element one 16-bit ulp differently. Both stay far below 1% of the
  // largest gradient (this run: about 1e-3).
  if (!(worst_unscale_error < 1e-2)) {
    std::fprintf(stderr, "%s: the hand-unscaled gradient differs from the plain one by %g of its size\n", name,
                 worst_unscale_error);
    ok = false;
  }
  if (skipped > steps / 10) {
    std::fprintf(stderr, "%s: %lld of %lld steps skipped\n", name, static_cast<long long>(skipped),
                 static_cast<long long>(steps));
    ok = false;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::stoll(argv[1]) : 200;
  const Data data = synthetic_data();
  bool ok = true;
  for (DType precision : {DType::kF16, DType::kBF16}) ok = train(precision, steps, data) && ok;
  return ok ? 0 : 1;
}

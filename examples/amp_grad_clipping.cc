// Mixed precision in your own loop, working with unscaled gradients: the scaled backward, then
// scaler.unscale_(opt) so that clip_grad_norm_ sees the true gradients, then scaler.step and scaler.update
// (PyTorch's "Working with Unscaled Gradients" recipe). An MLP on Fashion-MNIST with SGD.
// Usage: amp_grad_clipping [fp16|bf16] [STEPS] [MAX_NORM]
// In bf16 the scaler is off (scaler_defaults_for: bf16 has fp32's exponent range) and the same loop runs
// unchanged: scale() returns the loss, unscale_ and update() do nothing, step() is a plain step.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "data/idx.h"
#include "data/loader.h"
#include "models/mlp.h"
#include "ops/loss/loss.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"

using namespace mantissa;

int main(int argc, char** argv) {
  const std::string precision = argc > 1 ? argv[1] : "fp16";
  const int64_t steps = argc > 2 ? std::stoll(argv[2]) : 300;
  const double max_norm = argc > 3 ? std::stod(argv[3]) : 2.0;
  if (precision != "fp16" && precision != "bf16") {
    std::fprintf(stderr, "precision must be fp16 or bf16, got '%s'\n", precision.c_str());
    return 2;
  }
  const DType dtype = precision == "fp16" ? DType::kF16 : DType::kBF16;

  absl::StatusOr<MnistData> data = read_mnist(MnistSplit::kTrain, {.scaling = PixelScaling::kNormalized});
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
    return 1;
  }
  DataLoader loader(std::make_shared<TensorDataset>(std::vector{data->images, data->labels}),
                    {.batch_size = 64, .shuffle = Shuffle::kRandom, .seed = 1});

  MLP model(784, {256}, 10);
  SGD opt(model.named_parameters(), {.lr = 0.1, .momentum = 0.9});
  amp::GradScaler scaler(amp::scaler_defaults_for(dtype));

  int64_t clipped = 0;
  double largest_clipped_norm = 0.0, first_losses = 0.0, last_losses = 0.0;
  const int64_t window = std::clamp<int64_t>(steps / 2, 1, 50);  // steps averaged at each end of the run
  for (int64_t step = 0; step < steps; ++step) {
    std::optional<Example> batch = loader.next();
    if (!batch) batch = loader.next();  // the epoch ended: start the next one
    const Tensor& images = (*batch)[0];
    const Tensor& labels = (*batch)[1];

    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast({.dtype = dtype});
      loss = cross_entropy(model.forward(images.flatten(1)), labels);
    }
    scaler.scale(loss).backward();

    // The grads hold loss * scale's gradients: unscale them in place before clipping, so that max_norm means
    // what it says whatever the scale is. step() then knows they are unscaled and does not unscale again.
    scaler.unscale_(opt);
    const double norm = clip_grad_norm_(model.parameters(), max_norm);  // the norm before clipping
    if (std::isfinite(norm) && norm > max_norm) {
      ++clipped;
      // The norm after clipping: an infinite max_norm only measures.
      const double after = clip_grad_norm_(model.parameters(), std::numeric_limits<double>::infinity());
      largest_clipped_norm = std::max(largest_clipped_norm, after);
    }
    // A non-finite norm means an inf/nan grad (the scale was too high): clip_grad_norm_ left the grads alone,
    // and step() skips the update; update() then backs the scale off.
    scaler.step(opt);
    scaler.update();

    if (step < window) first_losses += loss.item();
    if (step >= steps - window) last_losses += loss.item();
    if (step % 100 == 0)
      std::printf("step %lld: loss %.4f, grad norm %.3f\n", static_cast<long long>(step), loss.item(), norm);
  }

  const amp::GradScalerStats stats = scaler.stats();
  std::printf("loss: %.4f over the first %lld steps, %.4f over the last %lld\n", first_losses / window,
              static_cast<long long>(window), last_losses / window, static_cast<long long>(window));
  std::printf("clipped: %lld of %lld steps (max_norm %g; largest norm after clipping %.9g)\n",
              static_cast<long long>(clipped), static_cast<long long>(steps), max_norm, largest_clipped_norm);
  std::printf("scaler: %s, %lld updates, %lld skipped, scale %g\n", scaler.is_enabled() ? "on" : "off",
              static_cast<long long>(stats.steps), static_cast<long long>(stats.skipped_steps), scaler.get_scale());
  return 0;
}

// Mixed precision in your own loop with two models, two losses and two optimizers sharing one GradScaler
// (PyTorch's "Working with Multiple Models, Losses, and Optimizers" recipe). On Fashion-MNIST a classifier
// (SGD) gives logits, and a decoder (Adam) redraws the image from those 10 numbers: the classification loss
// trains the classifier, the reconstruction loss trains both. The two backwards share the classifier's
// graph, so the first keeps it (retain_graph); each optimizer steps on its own, and update() runs once per
// iteration, after both steps.
// Usage: amp_multiple_models [fp16|bf16] [STEPS]
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "data/idx.h"
#include "data/loader.h"
#include "models/mlp.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"
#include "optim/sgd.h"

using namespace mantissa;

int main(int argc, char** argv) {
  const std::string precision = argc > 1 ? argv[1] : "fp16";
  const int64_t steps = argc > 2 ? std::stoll(argv[2]) : 300;
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

  MLP classifier(784, {256}, 10), decoder(10, {256}, 784);
  SGD opt0(classifier.named_parameters(), {.lr = 0.05, .momentum = 0.9});
  Adam opt1(decoder.named_parameters(), {.lr = 1e-3});
  amp::GradScaler scaler(amp::scaler_defaults_for(dtype));  // one scaler for both

  int64_t applied0 = 0, applied1 = 0;
  double first[2] = {0, 0}, last[2] = {0, 0};  // mean losses at each end of the run
  const int64_t window = std::clamp<int64_t>(steps / 2, 1, 50);
  for (int64_t step = 0; step < steps; ++step) {
    std::optional<Example> batch = loader.next();
    if (!batch) batch = loader.next();  // the epoch ended: start the next one
    const Tensor images = (*batch)[0].flatten(1);

    opt0.zero_grad();
    opt1.zero_grad();
    Tensor loss0, loss1;
    {
      amp::AutocastGuard autocast({.dtype = dtype});
      const Tensor logits = classifier.forward(images);
      loss0 = cross_entropy(logits, (*batch)[1]);
      loss1 = mse_loss(decoder.forward(logits), images);
    }
    // Both losses are scaled by the same scale. loss1's backward runs through the classifier's graph again
    // (into the logits), so loss0's backward must keep it. The classifier's grads add up both losses'.
    scaler.scale(loss0).backward(Tensor(), {.retain_graph = true});
    scaler.scale(loss1).backward();

    // Each step checks its own optimizer's grads for infs (unscale_(opt0) first would let us clip or look
    // at the classifier's true grads). One update() after both combines their inf checks: an overflow in
    // either backs the scale off once.
    applied0 += scaler.step(opt0);
    applied1 += scaler.step(opt1);
    scaler.update();

    const double losses[2] = {loss0.item(), loss1.item()};
    for (int k = 0; k < 2; ++k) {
      if (step < window) first[k] += losses[k] / static_cast<double>(window);
      if (step >= steps - window) last[k] += losses[k] / static_cast<double>(window);
    }
    if (step % 100 == 0)
      std::printf("step %lld: classification %.4f, reconstruction %.4f\n", static_cast<long long>(step), losses[0],
                  losses[1]);
  }

  const amp::GradScalerStats stats = scaler.stats();
  std::printf("classification: %.4f over the first %lld steps, %.4f over the last %lld\n", first[0],
              static_cast<long long>(window), last[0], static_cast<long long>(window));
  std::printf("reconstruction: %.4f over the first %lld steps, %.4f over the last %lld\n", first[1],
              static_cast<long long>(window), last[1], static_cast<long long>(window));
  std::printf("steps: %lld iterations, %lld applied by opt0, %lld by opt1\n", static_cast<long long>(steps),
              static_cast<long long>(applied0), static_cast<long long>(applied1));
  std::printf("scaler: %s, %lld updates, %lld skipped, scale %g\n", scaler.is_enabled() ? "on" : "off",
              static_cast<long long>(stats.steps), static_cast<long long>(stats.skipped_steps), scaler.get_scale());
  return 0;
}

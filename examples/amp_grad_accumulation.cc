// Mixed precision in your own loop with gradient accumulation: each micro-batch's loss is divided by the
// number of micro-batches per step before its scaled backward adds to the grads, and scaler.step and
// scaler.update run once per effective batch (PyTorch's "Gradient accumulation" recipe). To show that this
// trains exactly like one big batch, the program trains an MLP on Fashion-MNIST twice from the same weights,
// with micro-batches of 32 accumulated 4 at a time and with batches of 128, and compares the two runs.
// Usage: amp_grad_accumulation [fp16|bf16|fp32] [STEPS] [MICRO_BATCHES]
// fp32 turns autocast and the scaler off (PyTorch's enabled=use_amp); bf16 turns the scaler off.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "data/idx.h"
#include "data/loader.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/reduce/reduce.h"
#include "optim/sgd.h"

using namespace mantissa;

struct RunResult {
  int64_t applied = 0, skipped = 0;  // optimizer steps
  int64_t updates = 0;               // scaler.update() calls the scaler counted (0 when it is off)
  double last_loss = 0.0;            // mean over the last 20 steps' effective batches
  double scale = 1.0;
};

// `steps` optimizer steps, each over `accum` micro-batches of `micro_batch` examples (accum 1: no accumulation).
RunResult train(MLP& model, const MnistData& data, amp::AutocastOptions autocast_options,
                amp::GradScalerOptions scaler_options, int64_t micro_batch, int64_t accum, int64_t steps) {
  // The same seed orders the examples the same way whatever the batch size, so micro-batches 4k .. 4k + 3
  // hold exactly the examples of batch k of the 128-example loader.
  DataLoader loader(std::make_shared<TensorDataset>(std::vector{data.images, data.labels}),
                    {.batch_size = micro_batch, .shuffle = Shuffle::kRandom, .seed = 1});
  SGD opt(model.named_parameters(), {.lr = 0.02, .momentum = 0.9});
  amp::GradScaler scaler(scaler_options);
  RunResult result;
  const int64_t window = std::clamp<int64_t>(steps / 2, 1, 20);
  for (int64_t step = 0; step < steps; ++step) {
    opt.zero_grad();
    double loss_sum = 0.0;
    for (int64_t i = 0; i < accum; ++i) {
      std::optional<Example> batch = loader.next();
      if (!batch) batch = loader.next();  // the epoch ended: start the next one
      Tensor loss;
      {
        amp::AutocastGuard autocast(autocast_options);
        loss = cross_entropy(model.forward((*batch)[0].flatten(1)), (*batch)[1]);
      }
      // Divided by accum, the micro-batches' grads add up to the mean over the effective batch. All of
      // them are scaled by the same scale, since update() runs only at the end of the effective batch.
      scaler.scale(loss / static_cast<double>(accum)).backward();
      loss_sum += loss.item();
    }
    // Once per effective batch: one inf check over the accumulated grads, one step, one update.
    if (scaler.step(opt)) {
      ++result.applied;
    } else {
      ++result.skipped;
    }
    scaler.update();
    const double effective_batch_loss = loss_sum / static_cast<double>(accum);
    if (step >= steps - window) result.last_loss += effective_batch_loss / static_cast<double>(window);
  }
  result.scale = scaler.get_scale();
  result.updates = scaler.stats().steps;
  return result;
}

int main(int argc, char** argv) {
  const std::string precision = argc > 1 ? argv[1] : "fp16";
  const int64_t steps = argc > 2 ? std::stoll(argv[2]) : 100;
  const int64_t accum = argc > 3 ? std::stoll(argv[3]) : 4;
  if (precision != "fp16" && precision != "bf16" && precision != "fp32") {
    std::fprintf(stderr, "precision must be fp16, bf16 or fp32, got '%s'\n", precision.c_str());
    return 2;
  }
  const DType dtype = precision == "bf16" ? DType::kBF16 : precision == "fp16" ? DType::kF16 : DType::kF32;
  // autocast(enabled=use_amp): a disabled guard may name f32.
  const amp::AutocastOptions autocast_options{
      .dtype = dtype, .state = dtype == DType::kF32 ? amp::AutocastState::kDisabled : amp::AutocastState::kEnabled};
  const amp::GradScalerOptions scaler_options = amp::scaler_defaults_for(dtype);

  absl::StatusOr<MnistData> data = read_mnist(MnistSplit::kTrain, {.scaling = PixelScaling::kNormalized});
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
    return 1;
  }

  // Two copies of one initial model.
  MLP accumulated(784, {256}, 10), one_batch(784, {256}, 10);
  one_batch.load_state_dict(accumulated.state_dict());
  std::vector<Tensor> initial;
  for (const Tensor& p : accumulated.parameters()) initial.push_back(p.clone());

  std::printf("%s, %lld steps: %lld micro-batches of 32 per step against one batch of %lld\n", precision.c_str(),
              static_cast<long long>(steps), static_cast<long long>(accum), static_cast<long long>(32 * accum));
  const RunResult a = train(accumulated, *data, autocast_options, scaler_options, 32, accum, steps);
  const RunResult b = train(one_batch, *data, autocast_options, scaler_options, 32 * accum, 1, steps);
  for (const auto& [name, r] : {std::pair{"accumulated:", a}, std::pair{"one_batch:", b}}) {
    std::printf("%s %lld steps applied, %lld skipped, %lld scaler updates, scale %g, last loss %.6f\n", name,
                static_cast<long long>(r.applied), static_cast<long long>(r.skipped), static_cast<long long>(r.updates),
                r.scale, r.last_loss);
  }

  // How far apart the two runs' weights ended (the L2 distance over all of them), against how far training
  // moved them.
  double apart = 0.0, moved = 0.0;
  const std::vector<Tensor> pa = accumulated.parameters(), pb = one_batch.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    apart += sum(pow(pa[i] - pb[i], 2.0)).item();
    moved += sum(pow(pb[i] - initial[i], 2.0)).item();
  }
  std::printf("weights: apart %.3g, moved %.3g, ratio %.3g\n", std::sqrt(apart), std::sqrt(moved),
              std::sqrt(apart / moved));
  return 0;
}

// Fewer bytes per parameter in a loop of your own (docs/precision_ladder.md): an MLP whose weights are bf16 with
// no fp32 masters, AdamW rounding each update into them (stochastically by default) and keeping its moments in
// 8-bit blocks. Halfway it saves a checkpoint; a second model and optimizer loaded from that file then train the
// second half, and must end bit for bit where the uninterrupted run ends: weights, moments' codes and absmax,
// compensation, the stochastic rounding's position in its stream.
// Usage: bf16_weights [nearest|stochastic|kahan] [fp32|bf16|8bit] [STEPS] [CHECKPOINT.h5]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "data/idx.h"
#include "data/loader.h"
#include "framework/autograd.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/reduce/reduce.h"
#include "optim/adam.h"
#include "train/checkpoint.h"

using namespace mantissa;

namespace {

// A run's data: the same shuffled order each time, so that the resumed run sees the batches the uninterrupted
// one saw after the checkpoint.
DataLoader train_loader(const MnistData& data) {
  return DataLoader(std::make_shared<TensorDataset>(std::vector{data.images, data.labels}),
                    {.batch_size = 64, .shuffle = Shuffle::kRandom, .seed = 1});
}

Example next_batch(DataLoader& loader) {
  std::optional<Example> batch = loader.next();
  if (!batch) batch = loader.next();  // the epoch ended: start the next one
  return *batch;
}

// One optimizer step: the forward under bf16 autocast on the bf16 weights, the backward (bf16 grads), the update.
double train_step(MLP& model, Optimizer& opt, const Example& batch) {
  opt.zero_grad();
  Tensor loss;
  {
    amp::AutocastGuard autocast({.dtype = DType::kBF16});
    loss = cross_entropy(model.forward(batch[0].flatten(1)), batch[1]);
  }
  loss.backward();
  opt.step();
  return loss.item();
}

double test_accuracy(MLP& model, const MnistData& test) {
  NoGradGuard no_grad;
  amp::AutocastGuard autocast({.dtype = DType::kBF16});
  const Tensor predicted = argmax(model.forward(test.images.flatten(1)), 1);
  return sum(eq(predicted, test.labels).to(DType::kF32)).item() / static_cast<double>(test.labels.numel());
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// The first tensor (a parameter or a state entry) in which two runs differ; empty when none does.
std::string first_difference(const MLP& a, const Optimizer& opt_a, const MLP& b, const Optimizer& opt_b) {
  const std::vector<NamedTensor> wa = a.state_dict(), wb = b.state_dict();
  for (size_t i = 0; i < wa.size(); ++i)
    if (!same_bits(wa[i].tensor, wb[i].tensor)) return "weight " + wa[i].name;
  const OptimizerState sa = opt_a.state_dict(), sb = opt_b.state_dict();
  if (sa.tensors.size() != sb.tensors.size()) return "the number of state tensors";
  for (const auto& [name, tensor] : sa.tensors) {
    const auto it = sb.tensors.find(name);
    if (it == sb.tensors.end() || !same_bits(tensor, it->second)) return "state " + name;
  }
  return "";
}

std::optional<PrecisionLadder> ladder_from(const std::string& rounding, const std::string& state) {
  return parse_precision_ladder("master_weights=none update_rounding=" + rounding + " optimizer_state=" + state +
                                (rounding == "stochastic" ? " seed=1" : ""));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string rounding = argc > 1 ? argv[1] : "stochastic";
  const std::string state = argc > 2 ? argv[2] : "8bit";
  const int64_t steps = argc > 3 ? std::stoll(argv[3]) : 600;
  const std::string checkpoint = argc > 4 ? argv[4] : "bf16_weights.h5";
  const std::optional<PrecisionLadder> ladder = ladder_from(rounding, state);
  if (!ladder || steps < 2) {
    std::fprintf(stderr,
                 "usage: bf16_weights [nearest|stochastic|kahan] [fp32|bf16|8bit] [STEPS >= 2] [CHECKPOINT.h5]; "
                 "got '%s' '%s' %lld\n",
                 rounding.c_str(), state.c_str(), static_cast<long long>(steps));
    return 2;
  }

  const MnistOptions data_options{.scaling = PixelScaling::kNormalized};
  absl::StatusOr<MnistData> train_set = read_mnist(MnistSplit::kTrain, data_options);
  absl::StatusOr<MnistData> test_set = read_mnist(MnistSplit::kTest, data_options);
  if (!train_set.ok() || !test_set.ok()) {
    std::fprintf(stderr, "%s\n", (train_set.ok() ? test_set.status() : train_set.status()).ToString().c_str());
    return 1;
  }

  // The weights become bf16 before the optimizer sees them: it checks that they match master_weights=none.
  MLP model(784, {256}, 10);
  model.to(DType::kBF16);
  AdamW opt(model.named_parameters(), {.lr = 1e-3}, *ladder);
  const BytesPerParameter bytes = ladder->bytes_per_parameter(/*moments=*/2, /*working_copy=*/false);
  const BytesPerParameter baseline = PrecisionLadder{}.bytes_per_parameter(2, /*working_copy=*/true);
  std::printf("ladder: %s\n", ladder->str().c_str());
  std::printf(
      "bytes: %.3f per parameter (weights %g, grads %g, moments %.3f, compensation %g) against %g with "
      "fp32 masters\n",
      bytes.total(), bytes.weights, bytes.grads, bytes.state, bytes.compensation, baseline.total());

  // The uninterrupted run, with a checkpoint after `half` steps.
  const int64_t half = steps / 2;
  DataLoader loader = train_loader(*train_set);
  double first = 0.0, last = 0.0;
  const int64_t window = std::min<int64_t>(50, half);
  for (int64_t step = 0; step < steps; ++step) {
    if (step == half) {
      Checkpoint ck;
      ck.model = model.state_dict();  // the bf16 weights themselves: there are no masters
      ck.optimizer = opt.state_dict();
      ck.meta.precision = "bf16";
      if (absl::Status saved = save_checkpoint(checkpoint, ck); !saved.ok()) {
        std::fprintf(stderr, "%s\n", saved.ToString().c_str());
        return 1;
      }
    }
    const double loss = train_step(model, opt, next_batch(loader));
    if (step < window) first += loss / window;
    if (step >= steps - window) last += loss / window;
    if (step % 100 == 0) std::printf("step %lld: loss %.4f\n", static_cast<long long>(step), loss);
  }
  std::printf("loss: %.4f over the first %lld steps, %.4f over the last %lld\n", first, static_cast<long long>(window),
              last, static_cast<long long>(window));
  std::printf("accuracy: %.2f%% on the test set\n", 100 * test_accuracy(model, *test_set));

  // The resumed run: another model and optimizer (their own initial values, overwritten by the file), the same
  // data from the checkpoint's batch on.
  MLP resumed(784, {256}, 10);
  resumed.to(DType::kBF16);
  AdamW resumed_opt(resumed.named_parameters(), {.lr = 1e-3}, *ladder);
  absl::StatusOr<Checkpoint> ck = load_checkpoint(checkpoint);
  absl::Status fits = ck.ok() ? check_compatible(checkpoint, *ck, resumed, resumed_opt) : ck.status();
  if (!fits.ok()) {
    std::fprintf(stderr, "%s\n", fits.ToString().c_str());
    return 1;
  }
  resumed.load_state_dict(ck->model);
  resumed_opt.load_state_dict(ck->optimizer);  // refuses a state written under another rung, naming both
  DataLoader resumed_loader = train_loader(*train_set);
  for (int64_t step = 0; step < half; ++step) next_batch(resumed_loader);  // the batches before the checkpoint
  for (int64_t step = half; step < steps; ++step) train_step(resumed, resumed_opt, next_batch(resumed_loader));

  const std::string differs = first_difference(model, opt, resumed, resumed_opt);
  if (!differs.empty()) {
    std::printf("resume: FAILED, the run resumed at step %lld differs from the uninterrupted one in %s\n",
                static_cast<long long>(half), differs.c_str());
    return 1;
  }
  std::printf(
      "resume: bit-for-bit, the run resumed from %s at step %lld ends where the uninterrupted one does "
      "(%zu weights, %zu state tensors)\n",
      checkpoint.c_str(), static_cast<long long>(half), model.state_dict().size(), opt.state_dict().tensors.size());
  return 0;
}

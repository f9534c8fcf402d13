// Trains an MLP on Fashion-MNIST in fp16 with the Trainer and saves a checkpoint.
// Usage: train_fashion_mnist [CHECKPOINT.h5] [EPOCHS]
#include <cstdio>
#include <memory>
#include <string>

#include "data/idx.h"
#include "data/loader.h"
#include "models/mlp.h"
#include "optim/adam.h"
#include "train/trainer.h"

using namespace mantissa;

int main(int argc, char** argv) {
  const std::string checkpoint = argc > 1 ? argv[1] : "fashion_mnist.h5";
  const int64_t epochs = argc > 2 ? std::stoll(argv[2]) : 2;

  const MnistOptions data_options{.scaling = PixelScaling::kNormalized};
  absl::StatusOr<MnistData> train_set = read_mnist(MnistSplit::kTrain, data_options);
  absl::StatusOr<MnistData> test_set = read_mnist(MnistSplit::kTest, data_options);
  if (!train_set.ok() || !test_set.ok()) {
    std::fprintf(stderr, "%s\n", (train_set.ok() ? test_set.status() : train_set.status()).ToString().c_str());
    return 1;
  }
  DataLoader train(std::make_shared<TensorDataset>(std::vector{train_set->images, train_set->labels}),
                   {.batch_size = 128, .shuffle = Shuffle::kRandom, .seed = 1});
  DataLoader test(std::make_shared<TensorDataset>(std::vector{test_set->images, test_set->labels}),
                  {.batch_size = 1000});

  MLP model(784, {256, 256}, 10);
  Adam adam(model.named_parameters(), {.lr = 1e-3});
  Trainer trainer({.precision = Precision::kF16, .epochs = epochs}, model,
                  classification_task([&](const Tensor& x) { return model.forward(x.flatten(1)); }), adam, train,
                  &test);
  trainer.on_eval_end([](const EvalMetrics& m) {
    std::printf("step %lld: test accuracy %.2f%%\n", static_cast<long long>(m.step), 100 * m.accuracy.value());
  });

  absl::StatusOr<RunSummary> summary = trainer.fit();
  absl::Status saved = summary.ok() ? trainer.save_checkpoint(checkpoint) : summary.status();
  if (!saved.ok()) {
    std::fprintf(stderr, "%s\n", saved.ToString().c_str());
    return 1;
  }
  std::printf("%lld steps, %lld skipped, loss scale %g; saved %s\n", static_cast<long long>(summary->steps),
              static_cast<long long>(summary->skipped_steps), summary->final_scale, checkpoint.c_str());
  return 0;
}

// A user's program: includes installed headers, runs an op, a CUDA query and a few fp16 Trainer steps.
#include <cstdio>
#include <memory>

#include "data/loader.h"
#include "framework/cuda/device.h"
#include "framework/random.h"
#include "framework/tensor.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "optim/sgd.h"
#include "train/trainer.h"

int main() {
  using namespace mantissa;
  const Tensor a = from_vector<float>({1, 2, 3});
  const double s = sum(a * a).item();

  auto data = std::make_shared<TensorDataset>(
      std::vector<Tensor>{randn({64, 8}), from_vector<int64_t>(std::vector<int64_t>(64, 1), {64})});
  DataLoader loader(data, {.batch_size = 16});
  MLP model(8, {16}, 2);
  SGD sgd(model.named_parameters(), {.lr = 0.1});
  Trainer trainer({.precision = Precision::kF16, .max_steps = 4}, model,
                  classification_task([&](const Tensor& x) { return model.forward(x); }), sgd, loader);
  const absl::StatusOr<RunSummary> summary = trainer.fit();
  std::printf("consumer: sum %g, cuda devices %d, trainer steps %lld\n", s, cuda_device_count(),
              summary.ok() ? static_cast<long long>(summary->steps) : -1LL);
  return s == 14.0 && summary.ok() && summary->steps == 4 ? 0 : 1;
}

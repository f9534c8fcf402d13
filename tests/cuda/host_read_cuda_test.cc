// Host reads on a GPU: HostCopy lands without a synchronization, item() reports one, and the Trainer's
// fp16 step (autocast, GradScaler, clipping, Adam) has no host read in it: each step's values are read once,
// through HostCopy, after the next step is enqueued. Skipped without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "framework/cuda/device.h"
#include "framework/host_read.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "ops/reduce/reduce.h"
#include "optim/adam.h"
#include "tests/support/cuda_skip.h"
#include "tests/train/read_order_support.h"
#include "train/trainer.h"

namespace mantissa {
namespace {

class HostReadCuda : public ::testing::Test {
 protected:
  void SetUp() override { MT_SKIP_WITHOUT_CUDA(); }
};

TEST_F(HostReadCuda, HostCopyLandsAndOnlyItsWaitIsAHostRead) {
  const Tensor src = arange(0, 1000, 1, {.dtype = DType::kF64}).to(cuda(0));
  std::vector<HostRead> seen;
  ScopedHostReadObserver observe([&](HostRead r) { seen.push_back(r); });
  HostCopy copy(src);
  const Tensor& host = copy.wait();
  ASSERT_EQ(host.numel(), 1000);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(host.data<double>()[i], i);
  EXPECT_EQ(seen, std::vector<HostRead>{HostRead::kHostCopyWait});
}

TEST_F(HostReadCuda, ItemOnAGpuTensorIsADeviceToHostRead) {
  const Tensor t = scalar_tensor(4.0).to(cuda(0));
  std::vector<HostRead> seen;
  ScopedHostReadObserver observe([&](HostRead r) { seen.push_back(r); });
  EXPECT_EQ(t.item(), 4.0);
  EXPECT_EQ(seen, (std::vector<HostRead>{HostRead::kItem, HostRead::kDeviceToHost}));
}

// The host's events (tests/train/read_order_support.h) inside the steps: none but the planned reads.
TEST_F(HostReadCuda, TrainerStepsReadNothingUntilTheNextStepIsEnqueued) {
  constexpr int64_t kSteps = 12;
  Generator gen(3);
  MLP model(32, {64, 64}, 8, {.generator = &gen});
  model.to(cuda(0));
  Adam adam(model.named_parameters(), {.lr = 1e-3});
  const Tensor x = randn({512, 32}, {}, &gen), y = argmax(x.narrow(1, 0, 8), 1);  // learnable labels
  DataLoader train(std::make_shared<TensorDataset>(std::vector<Tensor>{x, y}),
                   {.batch_size = 64, .shuffle = Shuffle::kRandom, .seed = 1, .pin_memory = PinMemory::kYes});
  ReadOrderLog log;
  Trainer trainer({.precision = Precision::kF16, .max_steps = kSteps, .clip_grad_norm = 1.0}, model,
                  log.logging_loss(classification_task([&](const Tensor& in) { return model.forward(in); })), adam,
                  train);
  log.log_steps(trainer);
  absl::StatusOr<RunSummary> summary;
  {
    const ScopedHostReadObserver observe = log.observe_reads();
    summary = trainer.fit();
  }
  ASSERT_TRUE(summary.ok()) << summary.status();
  // The fit's own reads before the first step (the scaler's counters) and after the last (the summary's
  // scale and counters) are outside the steps: look from the first "L" to the last "S".
  const std::vector<std::string>& events = log.events;
  size_t first = 0;
  while (first < events.size() && events[first] != "L") ++first;
  size_t last = events.size();
  while (last > 0 && events[last - 1] != "S" + std::to_string(kSteps)) --last;
  EXPECT_EQ(std::vector<std::string>(events.begin() + static_cast<std::ptrdiff_t>(first),
                                     events.begin() + static_cast<std::ptrdiff_t>(last)),
            ReadOrderLog::expected_with_lag_one(kSteps));
}

}  // namespace
}  // namespace mantissa

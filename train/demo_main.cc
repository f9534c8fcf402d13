// mantissa-demo: a small MLP learns to imitate a fixed random "teacher" classifier on synthetic data,
// printing step, loss and accuracy as it goes. Finishes in seconds; exits non-zero if the loss did not
// drop. A stand-in for the real Fashion-MNIST example of the training issue.
#include <cstdio>
#include <exception>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "optim/sgd.h"

ABSL_FLAG(int, steps, 300, "SGD steps");
ABSL_FLAG(int, batch, 64, "batch size");
ABSL_FLAG(double, lr, 0.05, "learning rate");
ABSL_FLAG(uint64_t, seed, 1, "seed for the data and the initial weights");

namespace mantissa {
namespace {

constexpr int64_t kFeatures = 16, kClasses = 4, kHidden = 64;
constexpr int64_t kTrain = 4096, kTest = 1024;

// Labels: argmax of a random linear map of x, with a ReLU feature layer so the task is not linear.
Tensor teacher_labels(const Tensor& x, const Tensor& w1, const Tensor& w2) {
  return argmax(matmul(relu(matmul(x, w1)), w2), 1);
}

double accuracy(Sequential& model, const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;
  Tensor hits = eq(argmax(model.forward(x), 1), y).to(DType::kF32);
  return mean(hits).item();
}

int run() {
  Generator gen(absl::GetFlag(FLAGS_seed));
  const Tensor w1 = randn({kFeatures, 32}, {}, &gen), w2 = randn({32, kClasses}, {}, &gen);
  const Tensor x_train = randn({kTrain, kFeatures}, {}, &gen), x_test = randn({kTest, kFeatures}, {}, &gen);
  const Tensor y_train = teacher_labels(x_train, w1, w2), y_test = teacher_labels(x_test, w1, w2);

  Sequential model(std::make_shared<Linear>(kFeatures, kHidden, LinearOptions{.generator = &gen}),
                   std::make_shared<ReLU>(),
                   std::make_shared<Linear>(kHidden, kHidden, LinearOptions{.generator = &gen}),
                   std::make_shared<ReLU>(),
                   std::make_shared<Linear>(kHidden, kClasses, LinearOptions{.generator = &gen}));
  SGD sgd(model.named_parameters(), {.lr = absl::GetFlag(FLAGS_lr), .momentum = 0.9});
  const int steps = absl::GetFlag(FLAGS_steps);
  const int64_t batch = absl::GetFlag(FLAGS_batch);
  std::printf("mantissa-demo: MLP %lld-%lld-%lld-%lld learning a random teacher, %lld training examples\n",
              (long long)kFeatures, (long long)kHidden, (long long)kHidden, (long long)kClasses, (long long)kTrain);
  std::printf("%6s %10s %10s\n", "step", "loss", "test acc");

  double first_loss = 0.0, recent = 0.0;  // recent: mean loss over the last print interval
  int recent_count = 0;
  const int print_every = steps >= 10 ? steps / 10 : 1;
  for (int step = 0; step < steps; ++step) {
    const int64_t start = (step * batch) % (kTrain - batch + 1);
    const Tensor xb = x_train.narrow(0, start, batch), yb = y_train.narrow(0, start, batch);
    Tensor loss = cross_entropy(model.forward(xb), yb);
    sgd.zero_grad();
    loss.backward();
    sgd.step();
    const double l = loss.item();
    if (step == 0) first_loss = l;
    recent += l;
    ++recent_count;
    if ((step + 1) % print_every == 0 || step + 1 == steps) {
      std::printf("%6d %10.4f %9.1f%%\n", step + 1, recent / recent_count, 100.0 * accuracy(model, x_test, y_test));
      std::fflush(stdout);
      if (step + 1 < steps) recent = 0.0, recent_count = 0;
    }
  }
  const double final_loss = recent / recent_count;
  if (!(final_loss < 0.5 * first_loss)) {
    std::fprintf(stderr, "mantissa-demo: the loss did not drop: %.4f at the start, %.4f at the end\n", first_loss,
                 final_loss);
    return 1;
  }
  std::printf("mantissa-demo: loss %.4f -> %.4f\n", first_loss, final_loss);
  return 0;
}

}  // namespace
}  // namespace mantissa

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  try {
    return mantissa::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mantissa-demo: %s\n", e.what());
    return 1;
  }
}

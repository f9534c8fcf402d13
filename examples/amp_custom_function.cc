// Custom autograd functions under autocast (PyTorch's "Autocast and Custom Autograd Functions" recipe), with
// mantissa's Function (ops/function.h) in place of torch.autograd.Function:
// - MyLinear, x W^T + b, declares custom_bwd: its forward's matmul is autocast's (f16/bf16), and its backward
//   runs in that same autocast state, so its matmuls take the f16/bf16 gradient and the saved fp32 inputs
//   without a cast by hand (PyTorch's custom_fwd / custom_bwd pair).
// - SmoothedCrossEntropy, a label-smoothed cross-entropy the library does not have, needs fp32: it is an op of
//   its own with an fp32 category on both devices, registered in the autocast policy (amp::register_op), so
//   its logits arrive in fp32 whatever the layers before produced (PyTorch's custom_fwd(cast_inputs=...)).
// The program trains an MLP on Fashion-MNIST with the two functions, and its twin, from the same weights,
// with the built-in linear and the loss written with built-in ops, and prints how far apart they are.
// Usage: amp_custom_function [fp16|bf16] [STEPS]
#include <algorithm>
#include <any>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "data/idx.h"
#include "data/loader.h"
#include "models/layers/linear.h"
#include "ops/elementwise/elementwise.h"
#include "ops/function.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "ops/softmax/softmax.h"
#include "optim/sgd.h"

using namespace mantissa;

// y = x W^T + b. The backward runs in the forward's autocast state (custom_bwd): under autocast its matmuls
// cast the saved fp32 x and W to the gradient's f16/bf16, as the forward's did.
struct MyLinear : Function<MyLinear> {
  static constexpr std::string_view name = "MyLinear";
  static constexpr FunctionOptions options{.backward_autocast = BackwardAutocast::kAsForward};
  static inline DType backward_dtype = DType::kF32;  // what the weight gradient was computed in

  static Tensor forward(FunctionContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    ctx.save_for_backward({x, weight});
    return matmul(x, weight.transpose(0, 1)) + bias;
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
    const std::vector<Tensor> saved = ctx.saved_tensors();
    const Tensor &x = saved[0], &weight = saved[1], &g = grads[0];
    Tensor grad_weight = matmul(g.transpose(0, 1), x);
    backward_dtype = grad_weight.dtype();
    return {matmul(g, weight), grad_weight, sum(g, {0})};
  }
};

// The op's place in the autocast policy: fp32 on the CPU and on CUDA, like the built-in cross_entropy.
inline constexpr OpInfo kSmoothedCrossEntropy{"smoothed_cross_entropy",
                                              {.cpu = amp::CastPolicy::kFp32, .cuda = amp::CastPolicy::kFp32}};
const bool kRegistered = amp::register_op(kSmoothedCrossEntropy);

// The target distribution of label smoothing: 1 - eps on the label, eps / C spread over every class.
Tensor smoothed_targets(const Tensor& labels, int64_t classes, double eps) {
  return one_hot(labels, classes).to(DType::kF32) * (1.0 - eps) + eps / static_cast<double>(classes);
}

// mean over the batch of -sum_c q_c log softmax(logits)_c. It saves only its inputs, so it could even be
// differentiated twice; its gradient is (softmax(logits) - q) / N.
struct SmoothedCrossEntropy : Function<SmoothedCrossEntropy> {
  static constexpr std::string_view name = "SmoothedCrossEntropy";
  static constexpr FunctionOptions options{.op = &kSmoothedCrossEntropy};
  static inline DType logits_dtype = DType::kF32;  // what the forward got under autocast

  static Tensor forward(FunctionContext& ctx, const Tensor& logits, const Tensor& labels, double eps) {
    logits_dtype = logits.dtype();
    ctx.save_for_backward({logits, labels});
    ctx.saved_data["eps"] = eps;
    const Tensor q = smoothed_targets(labels, logits.size(1), eps);
    return -sum(q * log_softmax(logits, 1)) / static_cast<double>(logits.size(0));
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
    const std::vector<Tensor> saved = ctx.saved_tensors();
    const Tensor &logits = saved[0], &labels = saved[1];
    const Tensor q = smoothed_targets(labels, logits.size(1), std::any_cast<double>(ctx.saved_data.at("eps")));
    const Tensor grad_logits = (softmax(logits, 1) - q) * (grads[0] / static_cast<double>(logits.size(0)));
    return {grad_logits, Tensor(), Tensor()};
  }
};

// The same loss written with built-in ops, computed in fp32 by hand.
Tensor smoothed_cross_entropy_reference(const Tensor& logits, const Tensor& labels, double eps) {
  const Tensor z = logits.to(DType::kF32);
  return -sum(smoothed_targets(labels, z.size(1), eps) * log_softmax(z, 1)) / static_cast<double>(z.size(0));
}

struct Net {
  Linear fc1{784, 256}, fc2{256, 10};
  std::vector<NamedTensor> parameters() const {
    return {{"fc1.weight", fc1.weight}, {"fc1.bias", fc1.bias}, {"fc2.weight", fc2.weight}, {"fc2.bias", fc2.bias}};
  }
};

// The largest difference between two sets of gradients, relative to the largest gradient.
double relative_difference(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, max(abs(a[i].tensor.grad() - b[i].tensor.grad())).item());
    scale = std::max(scale, max(abs(b[i].tensor.grad())).item());
  }
  return diff / scale;
}

int main(int argc, char** argv) {
  const std::string precision = argc > 1 ? argv[1] : "fp16";
  const int64_t steps = argc > 2 ? std::stoll(argv[2]) : 300;
  if (precision != "fp16" && precision != "bf16") {
    std::fprintf(stderr, "precision must be fp16 or bf16, got '%s'\n", precision.c_str());
    return 2;
  }
  const DType dtype = precision == "fp16" ? DType::kF16 : DType::kBF16;
  const double eps = 0.1;

  absl::StatusOr<MnistData> data = read_mnist(MnistSplit::kTrain, {.scaling = PixelScaling::kNormalized});
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
    return 1;
  }
  DataLoader loader(std::make_shared<TensorDataset>(std::vector{data->images, data->labels}),
                    {.batch_size = 64, .shuffle = Shuffle::kRandom, .seed = 1});

  // The twin starts from the custom net's weights.
  Net custom, builtin;
  {
    NoGradGuard no_grad;
    const std::vector<NamedTensor> from = custom.parameters(), to = builtin.parameters();
    for (size_t i = 0; i < from.size(); ++i) copy_(to[i].tensor, from[i].tensor);
  }
  SGD custom_opt(custom.parameters(), {.lr = 0.1, .momentum = 0.9});
  SGD builtin_opt(builtin.parameters(), {.lr = 0.1, .momentum = 0.9});
  amp::GradScaler custom_scaler(amp::scaler_defaults_for(dtype)), builtin_scaler(amp::scaler_defaults_for(dtype));

  double first_step_difference = 0.0, first_losses = 0.0, last_losses = 0.0, last_builtin_losses = 0.0;
  const int64_t window = std::clamp<int64_t>(steps / 2, 1, 50);  // steps averaged at each end of the run
  for (int64_t step = 0; step < steps; ++step) {
    std::optional<Example> batch = loader.next();
    if (!batch) batch = loader.next();  // the epoch ended: start the next one
    const Tensor images = (*batch)[0].flatten(1);
    const Tensor& labels = (*batch)[1];

    custom_opt.zero_grad();
    builtin_opt.zero_grad();
    Tensor loss, builtin_loss;
    {
      amp::AutocastGuard autocast({.dtype = dtype});
      const Tensor h = relu(MyLinear::apply(images, custom.fc1.weight, custom.fc1.bias));
      loss = SmoothedCrossEntropy::apply(MyLinear::apply(h, custom.fc2.weight, custom.fc2.bias), labels, eps);

      const Tensor builtin_h = relu(linear(images, builtin.fc1.weight, builtin.fc1.bias));
      builtin_loss =
          smoothed_cross_entropy_reference(linear(builtin_h, builtin.fc2.weight, builtin.fc2.bias), labels, eps);
    }
    // The backwards run after the guard is gone: MyLinear's still runs in f16/bf16 (custom_bwd).
    custom_scaler.scale(loss).backward();
    builtin_scaler.scale(builtin_loss).backward();
    if (step == 0) {
      custom_scaler.unscale_(custom_opt);
      builtin_scaler.unscale_(builtin_opt);
      first_step_difference = relative_difference(custom.parameters(), builtin.parameters());
    }
    custom_scaler.step(custom_opt);
    custom_scaler.update();
    builtin_scaler.step(builtin_opt);
    builtin_scaler.update();

    if (step < window) first_losses += loss.item();
    if (step >= steps - window) {
      last_losses += loss.item();
      last_builtin_losses += builtin_loss.item();
    }
    if (step % 100 == 0) std::printf("step %lld: loss %.4f\n", static_cast<long long>(step), loss.item());
  }

  const std::string cpu(amp::policy_name(amp::policy_for("smoothed_cross_entropy", DeviceType::kCPU)));
  const std::string cuda(amp::policy_name(amp::policy_for("smoothed_cross_entropy", DeviceType::kCUDA)));
  std::printf("policy: smoothed_cross_entropy is %s under CPU autocast, %s under CUDA autocast (registered: %s)\n",
              cpu.c_str(), cuda.c_str(), kRegistered ? "yes" : "no");
  std::printf("dtypes: MyLinear backward %s, SmoothedCrossEntropy forward %s\n",
              std::string(dtype_name(MyLinear::backward_dtype)).c_str(),
              std::string(dtype_name(SmoothedCrossEntropy::logits_dtype)).c_str());
  std::printf("loss: %.4f over the first %lld steps, %.4f over the last %lld\n", first_losses / window,
              static_cast<long long>(window), last_losses / window, static_cast<long long>(window));
  std::printf("builtin: %.4f over the last %lld steps; step-0 gradients differ by %.3g of the largest\n",
              last_builtin_losses / window, static_cast<long long>(window), first_step_difference);
  const amp::GradScalerStats stats = custom_scaler.stats();
  std::printf("scaler: %s, %lld updates, %lld skipped, scale %g\n", custom_scaler.is_enabled() ? "on" : "off",
              static_cast<long long>(stats.steps), static_cast<long long>(stats.skipped_steps),
              custom_scaler.get_scale());
  return 0;
}

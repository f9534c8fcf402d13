// The precision report: module rows against the fp32 baseline, gradient underflow counted by hand, the
// model left as it was, the picture.
#include "amp/precision_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <unistd.h>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/random.h"
#include "models/cnn.h"
#include "models/gpt.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/reduce/reduce.h"

namespace mantissa::amp {
namespace {

TEST(PrecisionReport, AnF32RunDiffersFromTheBaselineByExactlyZero) {
  manual_seed(1);
  MLP model(16, {32, 32}, 4);
  Generator gen(2);
  const Tensor x = randn({8, 16}, {}, &gen);
  const Tensor y = from_vector<int64_t>({0, 1, 2, 3, 0, 1, 2, 3}, {8});
  const PrecisionReport r = precision_report(model, [&] { return cross_entropy(model.forward(x), y); },
                                             {.precisions = {DType::kF32, DType::kBF16, DType::kF16}});
  ASSERT_FALSE(r.modules.empty());
  for (const ModuleRow& m : r.modules) {
    ASSERT_EQ(m.precisions.size(), 4u) << m.path;
    EXPECT_EQ(m.precisions[1].precision, "f32");
    EXPECT_EQ(m.precisions[1].max_abs_diff, 0.0) << m.path;
    EXPECT_EQ(m.precisions[1].max_rel_diff, 0.0) << m.path;
  }
  EXPECT_EQ(r.losses[1].second, r.loss);
  // Under autocast the Linears take f32 and give bf16/f16 (the weights stay f32 masters), and differ.
  const ModuleRow& first = r.modules[0];
  EXPECT_EQ(first.path, "layers.0");
  EXPECT_EQ(first.type, "Linear");
  EXPECT_EQ(first.parameter_dtypes, (std::vector<std::string>{"f32", "f32"}));
  EXPECT_EQ(first.precisions[2].input_dtypes, std::vector<std::string>{"f32"});
  EXPECT_EQ(first.precisions[2].output_dtypes, std::vector<std::string>{"bf16"});
  EXPECT_EQ(first.precisions[3].output_dtypes, std::vector<std::string>{"f16"});
  EXPECT_GT(first.precisions[2].max_abs_diff, 0.0);
  EXPECT_GT(first.precisions[2].max_abs_diff, first.precisions[3].max_abs_diff);  // bf16 has 3 fewer bits
  EXPECT_EQ(r.modules.back().path, "");                                           // the root's call finishes last
  // An activation gradient for every distinct module output (the Sequential's and the MLP's are layers.4's),
  // although outputs freed during the forward leave their addresses to later ones.
  std::vector<std::string> activations;
  for (const GradientRow& g : r.gradients) {
    if (g.activation) activations.push_back(g.name);
  }
  EXPECT_EQ(activations, (std::vector<std::string>{"layers.4 output", "layers.3 output", "layers.2 output",
                                                   "layers.1 output", "layers.0 output"}));
  EXPECT_NE(r.table().find("layers.2"), std::string::npos);
  EXPECT_NE(r.json().find("\"suggested_scale\""), std::string::npos);
}

// Linear(3 -> 1) on two rows, loss = 2^-30 * sum(outputs): every gradient is known exactly.
TEST(PrecisionReport, UnderflowFractionsOfKnownGradients) {
  Linear model(3, 1);
  {
    NoGradGuard no_grad;
    copy_(model.weight, from_vector<float>({0.5f, -0.25f, 1.0f}, {1, 3}));
    copy_(model.bias, from_vector<float>({0.0f}, {1}));
  }
  // Column sums 1, 1024, 1/32: weight grads 2^-30, 2^-20, 2^-35; bias grad 2 * 2^-30 = 2^-29; the output's
  // gradient 2^-30 in both rows.
  const Tensor x = from_vector<float>({0.5f, 512.0f, 0.015625f, 0.5f, 512.0f, 0.015625f}, {2, 3});
  const PrecisionReport r = precision_report(model, [&] { return mul(sum(model.forward(x)), 0x1p-30); },
                                             {.precisions = {}, .loss_scale = 1024});
  ASSERT_EQ(r.gradients.size(), 3u);
  const GradientRow& w = r.gradients[0];
  EXPECT_EQ(w.name, "weight");
  EXPECT_FALSE(w.activation);
  EXPECT_EQ(w.unscaled.nonzero, 3);
  EXPECT_DOUBLE_EQ(w.unscaled.underflow, 2.0 / 3);  // 2^-30 and 2^-35 are <= 2^-25
  EXPECT_DOUBLE_EQ(w.unscaled.max_abs, 0x1p-20);
  EXPECT_DOUBLE_EQ(w.scaled.underflow, 1.0 / 3);  // x 2^10: 2^-25 still rounds to zero (ties to even)
  EXPECT_DOUBLE_EQ(w.scaled.subnormal, 1.0 / 3);  // 2^-20
  const GradientRow& b = r.gradients[1];
  EXPECT_EQ(b.name, "bias");
  EXPECT_DOUBLE_EQ(b.unscaled.underflow, 1.0);
  EXPECT_DOUBLE_EQ(b.scaled.underflow, 0.0);
  const GradientRow& out = r.gradients[2];
  EXPECT_EQ(out.name, "(model) output");
  EXPECT_TRUE(out.activation);
  EXPECT_EQ(out.unscaled.nonzero, 2);
  EXPECT_DOUBLE_EQ(out.unscaled.underflow, 1.0);
  EXPECT_DOUBLE_EQ(out.scaled.underflow, 0.0);
  EXPECT_DOUBLE_EQ(r.max_abs_gradient, 0x1p-20);
  EXPECT_EQ(r.suggested_scale, 0x1p24);    // 2^-20 * 2^24 = 16 is far below 65504 / 2: the cap
  EXPECT_EQ(r.unscaled.count_at(-30), 3);  // the weight's 2^-30 and the two output gradients
  EXPECT_EQ(r.scaled.count_at(-20), 3);
}

int64_t flushed(const PrecisionReport& r, bool scaled) {
  double n = 0;
  for (const GradientRow& g : r.gradients) {
    const ScaledUnderflow& u = scaled ? g.scaled : g.unscaled;
    n += u.underflow * static_cast<double>(u.nonzero);
  }
  return std::llround(n);
}

TEST(PrecisionReport, ALargerScaleLowersTheUnderflowOnTheMlp) {
  manual_seed(3);
  MLP model(32, {64, 64}, 10);
  Generator gen(4);
  const Tensor x = randn({16, 32}, {}, &gen);
  const Tensor y = from_vector<int64_t>(std::vector<int64_t>(16, 3), {16});
  // A loss scaled down by 2^-16 makes the gradients small enough for fp16 to lose some.
  auto loss = [&] { return mul(cross_entropy(model.forward(x), y), 0x1p-16); };
  const PrecisionReport r1 = precision_report(model, loss, {.precisions = {}, .loss_scale = 1});
  const PrecisionReport r2 = precision_report(model, loss, {.precisions = {}, .loss_scale = 256});
  const PrecisionReport r3 = precision_report(model, loss, {.precisions = {}, .loss_scale = 65536});
  EXPECT_EQ(flushed(r1, true), flushed(r1, false));
  EXPECT_GT(flushed(r1, false), 0);
  EXPECT_LT(flushed(r2, true), flushed(r1, true));
  EXPECT_LT(flushed(r3, true), flushed(r2, true));
  EXPECT_EQ(flushed(r3, false), flushed(r1, false));  // the unscaled counts do not depend on the scale
}

TEST(PrecisionReport, LeavesTheModelAsItWas) {
  Generator init(5);
  CNN model({.generator = &init});  // BatchNorm: running statistics that a training-mode forward updates
  model.train();
  Generator gen(6);
  const Tensor x = randn({4, 1, CNN::kImageSize, CNN::kImageSize}, {}, &gen);
  auto loss = [&] { return sum(model.forward(x)); };
  loss().backward();  // a gradient the user already has
  std::vector<Tensor> grads, buffers;
  for (const auto& p : model.named_parameters()) grads.push_back(p.tensor.grad().clone());
  for (const auto& b : model.named_buffers()) buffers.push_back(b.tensor.clone());
  const auto generator = default_generator().state();
  precision_report(model, loss);
  size_t i = 0;
  for (const auto& p : model.named_parameters()) {
    EXPECT_EQ(max(abs(sub(p.tensor.grad(), grads[i++]))).item(), 0.0) << p.name;
  }
  i = 0;
  for (const auto& b : model.named_buffers()) {
    EXPECT_EQ(max(abs(sub(b.tensor.to(DType::kF64), buffers[i++].to(DType::kF64)))).item(), 0.0) << b.name;
  }
  EXPECT_EQ(default_generator().state().counter, generator.counter);
}

TEST(PrecisionReport, RunsOnTheGptWithEveryBlockInTheTable) {
  Generator init(7);
  GPT model({.vocab_size = 11, .n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8}, {.generator = &init});
  std::vector<int64_t> tokens(16);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>((i * 7) % 11);
  const Tensor idx = from_vector<int64_t>(tokens, {2, 8});
  const PrecisionReport r = precision_report(model, [&] { return model.forward(idx, idx).loss; });
  const std::string table = r.table();
  for (const char* path : {"transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_proj", "transformer.ln_f"}) {
    EXPECT_NE(table.find(path), std::string::npos) << path << "\n" << table;
  }
  EXPECT_GT(r.gradients.size(), model.named_parameters().size());  // activation gradients too
  for (const GradientRow& g : r.gradients) {  // the loss (GPT's second output) is no activation: its grad is 1
    EXPECT_FALSE(g.activation && g.unscaled.numel == 1) << g.name;
  }
  EXPECT_TRUE(std::isfinite(r.losses[1].second));
}

// A module of your own whose forward does not go through call_hooked: x + gelu(fc(x)).
class GeluResidual : public Module {
 public:
  explicit GeluResidual(Generator* g)
      : fc(register_module("fc", std::make_shared<Linear>(8, 8, LinearOptions{.generator = g}))) {}
  std::string type_name() const override { return "GeluResidual"; }
  Tensor forward(const Tensor& x) { return x + gelu(fc->forward(x)); }
  std::shared_ptr<Linear> fc;
};

// Its row is in the report, with the precisions of its call, whether a Sequential calls it or the loss
// function does, through call().
TEST(PrecisionReport, HasARowForAModuleOfYourOwn) {
  Generator g(8);
  Sequential model(std::make_shared<Linear>(8, 8, LinearOptions{.generator = &g}), std::make_shared<GeluResidual>(&g),
                   std::make_shared<Linear>(8, 3, LinearOptions{.generator = &g}));
  const Tensor x = randn({4, 8}, {}, &g);
  const Tensor y = from_vector<int64_t>({0, 1, 2, 1}, {4});
  const PrecisionReport r = precision_report(model, [&] { return cross_entropy(model.forward(x), y); });
  std::vector<std::string> paths;
  for (const ModuleRow& m : r.modules) paths.push_back(m.path + " " + m.type);
  EXPECT_EQ(paths, (std::vector<std::string>{"0 Linear", "1.fc Linear", "1 GeluResidual", "2 Linear", " Sequential"}));
  const ModuleRow& own = r.modules[2];
  ASSERT_EQ(own.precisions.size(), 3u);                                         // f32, bf16, f16
  EXPECT_EQ(own.precisions[1].input_dtypes, std::vector<std::string>{"bf16"});  // the first Linear's output
  EXPECT_EQ(own.precisions[1].output_dtypes, std::vector<std::string>{"bf16"});
  EXPECT_GT(own.precisions[1].max_abs_diff, 0.0);
  bool activation = false;
  for (const GradientRow& gr : r.gradients) activation |= gr.name == "1 output";
  EXPECT_TRUE(activation) << "its output's gradient is counted too";
  EXPECT_NE(r.table().find("GeluResidual"), std::string::npos) << r.table();

  GeluResidual root(&g);
  const PrecisionReport own_root =
      precision_report(root, [&] { return sum(call(root, x)); }, {.precisions = {DType::kF16}});
  ASSERT_EQ(own_root.modules.size(), 2u);
  EXPECT_EQ(own_root.modules[1].path, "");
  EXPECT_EQ(own_root.modules[1].type, "GeluResidual");
}

TEST(PrecisionReport, DrawsThePictureOrSaysWhy) {
  Linear model(4, 3);
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  const PrecisionReport r = precision_report(model, [&] { return sum(model.forward(x)); });
  EXPECT_THROW(plot_gradient_histogram(r, "/nonexistent-folder/h.png", "t"), Error);
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot is not installed";
  const auto dir = std::filesystem::temp_directory_path() / ("precision_report_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string png = (dir / "h.png").string();
  plot_gradient_histogram(r, png, "a \"quoted\" title");
  std::ifstream f(png, std::ios::binary);
  char magic[8] = {};
  f.read(magic, 8);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);  // no temporary left
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mantissa::amp

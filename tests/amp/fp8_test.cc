// amp/fp8.h: which linears an Fp8Context manages (Linear modules with dims multiple of 16, minus exclude), the
// guard routing them (and only them) through FP8, delayed scaling step by step on a tiny Linear against a
// sequence computed by hand (history 3, max, margin 1, gradient accumulation, the ring rolling), stats and
// overflow_total, and the state for checkpoints: names and shapes, a round trip that continues training
// bit for bit, and every load error, after which nothing has changed.
#include "amp/fp8.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "framework/autograd.h"
#include "framework/error.h"
#include "models/layers/activation.h"
#include "models/layers/embedding.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "optim/sgd.h"

namespace mantissa::amp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// x [rows, cols] filled with peak / 2, one element peak: max |x| is exactly `peak`, and only that element can
// overflow at a scale that takes peak / 2 to the format's max.
Tensor peaked(int64_t rows, int64_t cols, float peak) {
  Tensor t = full({rows, cols}, peak / 2.0f);
  t.data<float>()[0] = peak;
  return t;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Fp8Context, ManagesLinearsWhoseDimsAreMultiplesOf16) {
  Generator gen(1);
  Sequential model(std::make_shared<Linear>(32, 64, LinearOptions{.generator = &gen}), std::make_shared<ReLU>(),
                   std::make_shared<Linear>(64, 24, LinearOptions{.generator = &gen}),  // 24 outputs: not FP8
                   std::make_shared<Linear>(24, 16, LinearOptions{.generator = &gen}),  // 24 inputs: not FP8
                   std::make_shared<Embedding>(32, 16),                                 // 2-D, not a Linear
                   std::make_shared<Linear>(16, 16, LinearOptions{.bias = false, .generator = &gen}),
                   std::make_shared<Linear>(16, 10, LinearOptions{.generator = &gen}));  // a classifier head
  Fp8Context all(model, Fp8Recipe::delayed());
  EXPECT_THAT(all.managed(), ElementsAre("0.weight", "5.weight"));
  EXPECT_TRUE(all.manages(std::static_pointer_cast<Linear>(model.child("0"))->weight));
  EXPECT_FALSE(all.manages(std::static_pointer_cast<Linear>(model.child("6"))->weight));
  EXPECT_EQ(all.state("5.weight").name, "5.weight");
  EXPECT_THAT(error_of([&] { all.state("2.weight"); }), HasSubstr("'2.weight' is not a managed FP8 linear weight"));

  Fp8Context some(model, Fp8Recipe::delayed(), {.exclude = {"5"}});
  EXPECT_THAT(some.managed(), ElementsAre("0.weight"));
  Fp8Context by_name(model, Fp8Recipe::delayed(), {.exclude = {"0.weight"}});
  EXPECT_THAT(by_name.managed(), ElementsAre("5.weight"));
  // A prefix matches whole dotted components only, and must name something.
  EXPECT_THAT(error_of([&] { Fp8Context bad(model, Fp8Recipe::delayed(), {.exclude = {"0.w"}}); }),
              HasSubstr("exclude entry '0.w' names no parameter of the model"));
  EXPECT_THAT(error_of([&] { Fp8Context bad(model, Fp8Recipe::delayed(), {.exclude = {"head"}}); }), HasSubstr("HINT"));
  // An f64 Linear (gradcheck's) has nothing FP8 can cast from: it stays on the ordinary path.
  Sequential f64_model(std::make_shared<Linear>(16, 16, LinearOptions{.dtype = DType::kF64}));
  EXPECT_TRUE(Fp8Context(f64_model, Fp8Recipe::delayed()).managed().empty());
  Fp8Recipe broken = Fp8Recipe::delayed();
  broken.input.history_len = 0;
  EXPECT_THAT(error_of([&] { Fp8Context bad(model, broken, {}); }), HasSubstr("input.history is 0"));
}

TEST(Fp8Context, GuardRoutesOnlyManagedWeightsAndOnlyWhileItLives) {
  Generator gen(2);
  auto hidden = std::make_shared<Linear>(16, 32, LinearOptions{.generator = &gen});
  auto head = std::make_shared<Linear>(32, 10, LinearOptions{.generator = &gen});
  Sequential model(hidden, head);
  Fp8Context fp8(model, Fp8Recipe::delayed());
  const Tensor x = peaked(4, 16, 1.0f);
  EXPECT_NE(hidden->forward(x).grad_fn()->name(), "Fp8LinearBackward");  // no guard
  {
    Fp8Guard guard(fp8);
    EXPECT_EQ(hidden->forward(x).grad_fn()->name(), "Fp8LinearBackward");
    const Tensor logits = head->forward(hidden->forward(x));
    EXPECT_NE(logits.grad_fn()->name(), "Fp8LinearBackward");  // the head takes the ordinary path
    EXPECT_EQ(logits.dtype(), DType::kF32);
    {
      // A second context's guard nests; the first one's routing comes back after it.
      Sequential other(std::make_shared<Linear>(16, 16));
      Fp8Context fp8_other(other, Fp8Recipe::dynamic());
      Fp8Guard inner(fp8_other);
      EXPECT_NE(hidden->forward(x).grad_fn()->name(), "Fp8LinearBackward");
    }
    EXPECT_EQ(hidden->forward(x).grad_fn()->name(), "Fp8LinearBackward");
  }
  EXPECT_NE(hidden->forward(x).grad_fn()->name(), "Fp8LinearBackward");
  EXPECT_EQ(linear_override(), nullptr);
}

// Fp8Options::accumulator holds while the context's guard lives (nested guards each bring theirs), and the
// tensor-core model changes the forward's sums: a 2^16 product beside ones.
TEST(Fp8Context, GuardSetsTheCpuAccumulatorOfItsOptions) {
  Generator gen(3);
  Sequential model(std::make_shared<Linear>(256, 16, LinearOptions{.generator = &gen}));
  Fp8Context plain(model, Fp8Recipe::dynamic());
  Fp8Context hopper(model, Fp8Recipe::dynamic(), {.accumulator = Fp8Accumulator::hopper(true)});
  EXPECT_EQ(hopper.accumulator(), Fp8Accumulator::hopper(true));
  const Tensor x = peaked(4, 256, 448.0f);
  Tensor y_plain, y_hopper;
  {
    Fp8Guard guard(hopper);
    EXPECT_EQ(cpu_fp8_accumulator(), Fp8Accumulator::hopper(true));
    y_hopper = model.forward(x);
    {
      Fp8Guard inner(plain);
      EXPECT_EQ(cpu_fp8_accumulator(), Fp8Accumulator::f32());
      y_plain = model.forward(x);
    }
    EXPECT_EQ(cpu_fp8_accumulator(), Fp8Accumulator::hopper(true));
  }
  EXPECT_EQ(cpu_fp8_accumulator(), Fp8Accumulator::f32());
  ASSERT_EQ(y_plain.numel(), y_hopper.numel());
  const Tensor a = y_plain.contiguous(), b = y_hopper.contiguous();
  EXPECT_NE(std::memcmp(a.data<float>(), b.data<float>(), sizeof(float) * a.numel()), 0);
}

// One step of the hand-computed sequence: the amax of each micro-batch's input and grad_output, the weight's
// amax for the whole step, and the scales step() must produce from them.
struct HandStep {
  std::vector<float> x_amax;  // one per micro-batch
  float w_amax;
  std::vector<float> g_amax;                    // one per micro-batch
  float input_scale, weight_scale, grad_scale;  // after step(): (fp8_max / amax) / 2, amax the history's max
  int64_t grad_overflow;                        // grad_output elements overflowed so far
};

TEST(Fp8Context, DelayedScalingStepByStepWithGradientAccumulation) {
  auto lin = std::make_shared<Linear>(16, 16);
  Sequential model(lin);
  Fp8Context fp8(model, Fp8Recipe::delayed(3, AmaxCompute::kMax, 1));
  // E4M3 max 448, E5M2 max 57344, margin 1. The histories of 3 after each step are in the comments
  // (input | weight | grad_output), ring order from the first step's entry.
  const std::vector<HandStep> steps = {
      // [3.5 0 0] | [0.5 0 0] | [1 0 0]: two micro-batches fold into one entry each.
      {{2.0f, 3.5f}, 0.5f, {0.25f, 1.0f}, 64.0f, 448.0f, 28672.0f, 0},
      // [3.5 7 0] | [.5 .5 0] | [1 4 0]: 4 * 28672 > 57344: the peak saturates (1 overflow); 7 * 64 = 448 fits.
      {{7.0f}, 0.5f, {4.0f}, 32.0f, 448.0f, 7168.0f, 1},
      // [3.5 7 1] | [.5 .5 .25] | [1 4 2]
      {{1.0f}, 0.25f, {2.0f}, 32.0f, 448.0f, 7168.0f, 1},
      // [.5 7 1] | [.25 .5 .25] | [.5 4 2]: the ring is back at the first entry
      {{0.5f}, 0.25f, {0.5f}, 32.0f, 448.0f, 7168.0f, 1},
      // [.5 .5 1] | [.25 .25 .25] | [.5 .5 2]: 7, 0.5 and 4 dropped out
      {{0.5f}, 0.25f, {0.5f}, 224.0f, 896.0f, 14336.0f, 1},
      // [.5 .5 .5] | [.25 .25 .25] | [.5 .5 .5]
      {{0.5f}, 0.25f, {0.5f}, 448.0f, 896.0f, 57344.0f, 1},
  };
  for (size_t t = 0; t < steps.size(); ++t) {
    SCOPED_TRACE(testing::Message() << "step " << t);
    const HandStep& s = steps[t];
    {
      NoGradGuard no_grad;
      copy_(lin->weight, peaked(16, 16, s.w_amax));
    }
    model.zero_grad();
    for (size_t m = 0; m < s.x_amax.size(); ++m) {
      Tensor y;
      {
        Fp8Guard guard(fp8);
        y = model.forward(peaked(4, 16, s.x_amax[m]));
      }
      y.backward(peaked(4, 16, s.g_amax[m]));
    }
    fp8.step();
    EXPECT_EQ(fp8.steps(), static_cast<int64_t>(t + 1));
    const std::vector<Fp8Context::TensorStats> st = fp8.stats();
    ASSERT_EQ(st.size(), 3u);
    EXPECT_EQ(st[0].role, "input");
    EXPECT_EQ(st[2].role, "grad_output");
    EXPECT_EQ(st[2].dtype, DType::kF8E5M2);
    EXPECT_EQ(st[0].scale, s.input_scale);
    EXPECT_EQ(st[1].scale, s.weight_scale);
    EXPECT_EQ(st[2].scale, s.grad_scale);
    EXPECT_EQ(st[0].overflow, 0);
    EXPECT_EQ(st[1].overflow, 0);
    EXPECT_EQ(st[2].overflow, s.grad_overflow);
    EXPECT_EQ(fp8.overflow_total().item(), static_cast<double>(s.grad_overflow));
    EXPECT_EQ(fp8.overflow_total().dtype(), DType::kI64);
    if (t == 2) {
      // The checkpoint order: newest first, the (fresh) current entry at 0.
      std::map<std::string, Tensor> sd;
      for (const NamedTensor& n : fp8.state_dict()) sd[n.name] = n.tensor;
      const Tensor h = sd.at("0.weight/input/amax_history");
      EXPECT_EQ(h.data<float>()[0], 0.0f);
      EXPECT_EQ(h.data<float>()[1], 1.0f);
      EXPECT_EQ(h.data<float>()[2], 7.0f);
      EXPECT_EQ(sd.at("0.weight/grad_output/scale").item(), 7168.0);
      EXPECT_EQ(sd.at("step").item(), 3.0);
    }
  }
  EXPECT_EQ(fp8.stats()[0].amax, 0.5);  // the amax the last scale came from
}

TEST(Fp8Context, StateDictNamesAndShapes) {
  Sequential model(std::make_shared<Linear>(16, 32), std::make_shared<Linear>(32, 16));
  Fp8Recipe recipe = Fp8Recipe::delayed(4);
  recipe.weight = {.scaling = Fp8Scaling::kDynamic};
  Fp8Context fp8(model, recipe);
  std::vector<std::string> names;
  for (const NamedTensor& n : fp8.state_dict()) {
    names.push_back(n.name);
    if (n.name == "step") {
      EXPECT_EQ(n.tensor.dtype(), DType::kI64);
      EXPECT_EQ(n.tensor.dim(), 0);
    } else if (n.name.ends_with("/scale")) {
      EXPECT_EQ(n.tensor.dim(), 0);
      EXPECT_EQ(n.tensor.item(), 1.0);
    } else if (n.name.ends_with("/overflow") || n.name.ends_with("/underflow")) {
      EXPECT_EQ(n.tensor.dim(), 0);
      EXPECT_EQ(n.tensor.item(), 0.0);
    } else {
      EXPECT_EQ(n.tensor.shape(), (Shape{n.name.find("/weight/") != std::string::npos ? 1 : 4})) << n.name;
    }
  }
  std::vector<std::string> want;
  for (const char* w : {"0.weight", "1.weight"})
    for (const char* role : {"input", "weight", "grad_output"})
      for (const char* field : {"amax_history", "scale", "overflow", "underflow"})
        want.push_back(std::string(w) + "/" + role + "/" + field);
  want.push_back("step");
  EXPECT_EQ(names, want);
}

// A small model and fixed batches for the resume test.
struct TrainingRun {
  explicit TrainingRun(uint64_t seed, const Fp8Recipe& recipe) : gen(seed) {
    model = std::make_shared<Sequential>(
        std::make_shared<Linear>(32, 32, LinearOptions{.generator = &gen}), std::make_shared<ReLU>(),
        std::make_shared<Linear>(32, 16, LinearOptions{.generator = &gen}), std::make_shared<ReLU>(),
        std::make_shared<Linear>(16, 10, LinearOptions{.generator = &gen}));
    fp8 = std::make_unique<Fp8Context>(*model, recipe);
    opt = std::make_unique<SGD>(model->named_parameters(), SGDOptions{.lr = 0.1});
  }
  // The loss of step t, a fixed function of t.
  float train_step(int64_t t) {
    Tensor x = full({8, 32}, 0.0f);
    Tensor y = zeros({8}, {.dtype = DType::kI64});
    std::mt19937 data(static_cast<uint32_t>(100 + t));
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < 8 * 32; ++i) x.data<float>()[i] = normal(data);
    for (int64_t i = 0; i < 8; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(data() % 10);
    opt->zero_grad();
    Tensor loss;
    {
      Fp8Guard guard(*fp8);
      loss = cross_entropy(model->forward(x), y);
    }
    loss.backward();
    opt->step();
    fp8->step();
    return loss.item<float>();
  }
  Generator gen;
  std::shared_ptr<Sequential> model;
  std::unique_ptr<Fp8Context> fp8;
  std::unique_ptr<SGD> opt;
};

void expect_bitwise_equal(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].name);
    EXPECT_EQ(a[i].name, b[i].name);
    const Tensor x = a[i].tensor.contiguous(), y = b[i].tensor.contiguous();
    ASSERT_EQ(x.shape(), y.shape());
    ASSERT_EQ(x.dtype(), y.dtype());
    EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0);
  }
}

TEST(Fp8Context, StateDictRoundTripContinuesBitExactly) {
  for (const Fp8Recipe& recipe : {Fp8Recipe::delayed(3), Fp8Recipe::delayed(4, AmaxCompute::kMostRecent, 1)}) {
    SCOPED_TRACE(recipe.str());
    TrainingRun straight(7, recipe);
    std::vector<float> losses;
    for (int64_t t = 0; t < 8; ++t) losses.push_back(straight.train_step(t));

    TrainingRun first(7, recipe);
    for (int64_t t = 0; t < 5; ++t) EXPECT_EQ(first.train_step(t), losses[static_cast<size_t>(t)]);
    std::vector<NamedTensor> weights, fp8_state = first.fp8->state_dict();
    for (const NamedTensor& p : first.model->state_dict()) weights.push_back({p.name, p.tensor.clone()});

    TrainingRun resumed(8, recipe);  // other initial weights, fresh FP8 state: all replaced by the load
    resumed.model->load_state_dict(weights);
    resumed.fp8->load_state_dict(fp8_state);
    expect_bitwise_equal(resumed.fp8->state_dict(), fp8_state);
    for (int64_t t = 5; t < 8; ++t) {
      const float loss = resumed.train_step(t);
      EXPECT_EQ(std::bit_cast<uint32_t>(loss), std::bit_cast<uint32_t>(losses[static_cast<size_t>(t)])) << "step " << t;
    }
    expect_bitwise_equal(resumed.model->state_dict(), straight.model->state_dict());
    expect_bitwise_equal(resumed.fp8->state_dict(), straight.fp8->state_dict());
  }
}

TEST(Fp8Context, LoadErrorsNameWhatDiffersAndLoadNothing) {
  TrainingRun run(9, Fp8Recipe::delayed(3));
  for (int64_t t = 0; t < 2; ++t) run.train_step(t);
  const std::vector<NamedTensor> good = run.fp8->state_dict();
  TrainingRun target(10, Fp8Recipe::delayed(3));
  target.train_step(0);
  const std::vector<NamedTensor> before = target.fp8->state_dict();
  auto edited = [&](const std::function<void(std::vector<NamedTensor>&)>& edit) {
    std::vector<NamedTensor> s = good;
    edit(s);
    return error_of([&] { target.fp8->load_state_dict(s); });
  };
  EXPECT_THAT(edited([](auto& s) { s.erase(s.begin() + 1); }),
              HasSubstr("missing '0.weight/input/scale'; unexpected none"));
  EXPECT_THAT(edited([](auto& s) {
                s.push_back({"9.weight/input/scale", scalar_tensor(1.0)});
              }),
              HasSubstr("missing none; unexpected '9.weight/input/scale'. HINT:"));
  EXPECT_THAT(edited([](auto& s) { s.push_back(s.front()); }),
              HasSubstr("'0.weight/input/amax_history' appears twice"));
  EXPECT_THAT(edited([](auto& s) { s.pop_back(); }), HasSubstr("missing 'step'"));
  EXPECT_THAT(edited([](auto& s) { s.back().tensor = scalar_tensor(2.0); }),
              HasSubstr("'step' must be one integer, got f32 []"));
  EXPECT_THAT(edited([](auto& s) { s.back().tensor = scalar_tensor(-1.0, {.dtype = DType::kI64}); }),
              HasSubstr("'step' is negative"));
  EXPECT_THAT(edited([](auto& s) { s[1].tensor = zeros({2}); }),
              HasSubstr("'0.weight/input/scale' must be one floating value, got f32 [2]"));
  EXPECT_THAT(edited([](auto& s) {
                s[0].tensor = zeros({3, 1});
              }),
              HasSubstr("'0.weight/input/amax_history' must be a 1-D floating tensor, got f32 [3, 1]"));
  // Another history length: the recipe differs from the checkpoint's.
  TrainingRun longer(9, Fp8Recipe::delayed(5));
  EXPECT_THAT(error_of([&] { longer.fp8->load_state_dict(good); }),
              HasSubstr("'0.weight/input/amax_history' holds 3 amaxes, but this recipe keeps 5 for input"));
  // Another set of linears: only 0.weight is common.
  Sequential small(std::make_shared<Linear>(16, 16));
  Fp8Context other(small, Fp8Recipe::delayed(3));
  EXPECT_THAT(
      error_of([&] { other.load_state_dict(good); }),
      HasSubstr("missing none; unexpected '2.weight/grad_output/amax_history', '2.weight/grad_output/overflow', "
                "'2.weight/grad_output/scale', '2.weight/grad_output/underflow' and 8 more"));
  expect_bitwise_equal(target.fp8->state_dict(), before);
  EXPECT_EQ(target.fp8->steps(), 1);
}

TEST(Fp8Context, NoManagedLinears) {
  Sequential model(std::make_shared<Linear>(10, 10));
  Fp8Context fp8(model, Fp8Recipe::delayed());
  EXPECT_TRUE(fp8.managed().empty());
  EXPECT_EQ(fp8.overflow_total().item(), 0.0);
  fp8.step();
  EXPECT_EQ(fp8.state_dict().size(), 1u);  // the step counter
  fp8.load_state_dict(fp8.state_dict());
  EXPECT_EQ(fp8.steps(), 1);
}

TEST(Fp8Context, DestroyedUnderItsGuardLeavesNoDanglingOverride) {
  Sequential model(std::make_shared<Linear>(16, 16));
  auto fp8 = std::make_unique<Fp8Context>(model, Fp8Recipe::delayed());
  Fp8Guard guard(*fp8);
  EXPECT_NE(linear_override(), nullptr);
  fp8.reset();
  EXPECT_EQ(linear_override(), nullptr);
  EXPECT_NE(model.forward(full({2, 16}, 1.0f)).grad_fn()->name(), "Fp8LinearBackward");
}

}  // namespace
}  // namespace mantissa::amp

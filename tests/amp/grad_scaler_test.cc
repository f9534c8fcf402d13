// GradScaler against PyTorch's contract, ported from PyTorch's own scaler tests (test_grad_scaling_*):
// the update rule, the two-Linear SGD case with an injected inf against an fp32 control, the disabled
// scaler, autocast, accumulation, two optimizers, unscale_, the f16 inf sequence, misuse and state.
#include "amp/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>

#include "amp/autocast.h"
#include "framework/random.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"

namespace mantissa::amp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// PyTorch's _amp_update_scale_ test: growth 2, backoff 0.25, interval 2, scale 4.
TEST(GradScalerContract, UpdateRule) {
  GradScaler scaler({.init_scale = 4.0, .growth_factor = 2.0, .backoff_factor = 0.25, .growth_interval = 2});
  auto iteration = [&](float grad) {
    Tensor w = zeros({1}, {.requires_grad = true});
    SGD opt({{"w", w}}, {.lr = 0.1});
    w.set_grad(full({1}, grad));
    scaler.step(opt);
    scaler.update();
  };
  iteration(1.0f);
  EXPECT_EQ(scaler.get_scale(), 4.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  iteration(1.0f);
  EXPECT_EQ(scaler.get_scale(), 8.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  iteration(kInf);
  EXPECT_EQ(scaler.get_scale(), 2.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

std::shared_ptr<Sequential> two_linears(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<Sequential>(std::make_shared<Linear>(8, 8, LinearOptions{.generator = &gen}),
                                      std::make_shared<Linear>(8, 8, LinearOptions{.generator = &gen}));
}

struct Batch {
  Tensor input, target;
};
std::vector<Batch> make_data() {
  Generator gen(7);
  std::vector<Batch> data;
  for (int i = 0; i < 4; ++i) data.push_back({randn({8, 8}, {}, &gen), randn({8, 8}, {}, &gen)});
  return data;
}

Tensor forward_loss(Sequential& model, const Batch& b, bool autocast) {
  if (!autocast) return mse_loss(model.forward(b.input), b.target);
  AutocastGuard guard({.dtype = DType::kF16});
  return mse_loss(model.forward(b.input), b.target);
}

constexpr int kSkipIter = 2;

// PyTorch's _run_scaling_case run(): the scaling run writes inf into the second layer's weight grad at
// kSkipIter; the control (plain fp32 API) skips that iteration's step instead.
void run(Sequential& model, SGD& opt, GradScaler& scaler, bool try_scaling_api, bool autocast) {
  const auto data = make_data();
  for (int i = 0; i < 4; ++i) {
    const Batch& b = data[i];
    opt.zero_grad();
    Tensor loss = forward_loss(model, b, autocast);
    if (try_scaling_api) {
      scaler.scale(loss).backward();
      if (i == kSkipIter && scaler.is_enabled()) fill_(model.at<Linear>(1)->weight.grad(), kInf);
      scaler.step(opt);
      scaler.update();
    } else {
      loss.backward();
      if (!scaler.is_enabled() || i != kSkipIter) opt.step();
    }
  }
}

void expect_params_close(const Module& a, const Module& b, double atol, double rtol) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    const float* x = pa[i].tensor.data<float>();
    const float* y = pb[i].tensor.data<float>();
    for (int64_t j = 0; j < pa[i].tensor.numel(); ++j)
      ASSERT_NEAR(x[j], y[j], atol + rtol * std::abs(y[j])) << pa[i].name << "[" << j << "]";
  }
}

void scaling_case(ScalerState state, bool autocast, double atol, double rtol) {
  auto control = two_linears(1), scaling = two_linears(1);
  SGD opt_control(control->named_parameters(), {.lr = 1.0});
  SGD opt_scaling(scaling->named_parameters(), {.lr = 1.0});
  GradScaler scaler({.init_scale = 128.0, .growth_factor = 2.0, .growth_interval = 1, .state = state});
  run(*control, opt_control, scaler, false, autocast);
  run(*scaling, opt_scaling, scaler, true, autocast);
  if (state == ScalerState::kEnabled) {
    EXPECT_EQ(scaler.get_scale(), 128.0 * 8.0 * 0.5);  // three growths, one backoff
  } else {
    EXPECT_EQ(scaler.get_scale(), 1.0);
  }
  expect_params_close(*scaling, *control, atol, rtol);
}

// Scaling by 2^k and unscaling are exact in fp32, so only accumulation order could differ: PyTorch's
// tolerances (atol 1e-7, rtol 1e-5).
TEST(GradScalerContract, SkippedIterationMatchesControl) { scaling_case(ScalerState::kEnabled, false, 1e-7, 1e-5); }
TEST(GradScalerContract, DisabledScalerIsPlainTraining) { scaling_case(ScalerState::kDisabled, false, 1e-7, 1e-5); }
// Both runs in f16 autocast; PyTorch's test_grad_scaling_autocast tolerance (f16 rounding of 16-bit
// activations may land differently on scaled and unscaled backward values near subnormals).
TEST(GradScalerContract, WithAutocast) { scaling_case(ScalerState::kEnabled, true, 1e-3, 1e-3); }

// test_grad_scaling_accumulation: 2 micro-batches per step; no inf, so 2 updates: 128 * 2 * 2.
TEST(GradScalerContract, GradientAccumulation) {
  auto control = two_linears(2), scaling = two_linears(2);
  SGD opt_control(control->named_parameters(), {.lr = 1.0});
  SGD opt_scaling(scaling->named_parameters(), {.lr = 1.0});
  GradScaler scaler({.init_scale = 128.0, .growth_factor = 2.0, .growth_interval = 1});
  const auto data = make_data();
  for (bool scaled : {false, true}) {
    Sequential& model = scaled ? *scaling : *control;
    SGD& opt = scaled ? opt_scaling : opt_control;
    for (int i = 0; i < 4; ++i) {
      Tensor loss = div(mse_loss(model.forward(data[i].input), data[i].target), 2.0);
      (scaled ? scaler.scale(loss) : loss).backward();
      if ((i + 1) % 2 == 0) {
        if (scaled) {
          scaler.step(opt);
          scaler.update();
        } else {
          opt.step();
        }
        opt.zero_grad();
      }
    }
  }
  EXPECT_EQ(scaler.get_scale(), 512.0);
  expect_params_close(*scaling, *control, 1e-7, 1e-5);  // exact power-of-two scaling, as above
}

// test_grad_scaling_multiple: two models, two optimizers, one scaler; inf only in the second model's
// grads: the first optimizer steps, the second skips, and the scale backs off once for both.
TEST(GradScalerContract, TwoOptimizersShareOneBackoff) {
  auto c0 = two_linears(3), c1 = two_linears(4), s0 = two_linears(3), s1 = two_linears(4);
  SGD oc0(c0->named_parameters(), {.lr = 1.0}), oc1(c1->named_parameters(), {.lr = 1.0});
  SGD os0(s0->named_parameters(), {.lr = 1.0}), os1(s1->named_parameters(), {.lr = 1.0});
  GradScaler scaler({.init_scale = 128.0, .growth_factor = 2.0, .growth_interval = 1});
  const auto data = make_data();
  for (bool scaled : {false, true}) {
    Sequential& m0 = scaled ? *s0 : *c0;
    Sequential& m1 = scaled ? *s1 : *c1;
    SGD& o0 = scaled ? os0 : oc0;
    SGD& o1 = scaled ? os1 : oc1;
    for (int i = 0; i < 4; ++i) {
      o0.zero_grad();
      o1.zero_grad();
      Tensor out0 = m0.forward(data[i].input), out1 = m1.forward(data[i].input);
      Tensor loss0 = mse_loss(add(mul(out0, 0.3), mul(out1, 0.7)), data[i].target);
      Tensor loss1 = mse_loss(sub(mul(out0, 0.6), mul(out1, 0.4)), data[i].target);
      if (scaled) {
        scaler.scale(loss0).backward(Tensor(), {.retain_graph = true});
        scaler.scale(loss1).backward();
        if (i == kSkipIter) fill_(m1.at<Linear>(1)->weight.grad(), kInf);
        scaler.unscale_(o0);  // as PyTorch's stress test: one optimizer unscaled explicitly
        EXPECT_TRUE(scaler.step(o0)) << i;
        EXPECT_EQ(scaler.step(o1), i != kSkipIter) << i;
        scaler.update();
      } else {
        loss0.backward(Tensor(), {.retain_graph = true});
        loss1.backward();
        o0.step();
        if (i != kSkipIter) o1.step();
      }
    }
  }
  EXPECT_EQ(scaler.get_scale(), 512.0);
  expect_params_close(*s0, *c0, 1e-7, 1e-5);  // exact power-of-two scaling, as above
  expect_params_close(*s1, *c1, 1e-7, 1e-5);
}

// Grad layouts for test 5: contiguous, a transposed view and a strided slice, each [3, 5].
Tensor grad_in_layout(int layout, double value) {
  if (layout == 0) return full({3, 5}, value);
  if (layout == 1) return full({5, 3}, value).t();
  return full({3, 10}, value).slice(1, 0, 10, 2);
}

TEST(GradScalerContract, UnscaleDividesAndFindsEveryNonFinite) {
  for (int layout = 0; layout < 3; ++layout) {
    Tensor w = zeros({3, 5}, {.requires_grad = true});
    SGD opt({{"w", w}}, {.lr = 1.0});
    GradScaler scaler({.init_scale = 4.0});  // inv_scale 0.25
    w.set_grad(grad_in_layout(layout, 4.0));
    scaler.unscale_(opt);
    for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(w.grad().contiguous().data<float>()[i], 1.0f) << layout;
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    for (float bad : {kInf, -kInf, std::numeric_limits<float>::quiet_NaN()})
      for (int64_t pos = 0; pos < 15; ++pos) {
        Tensor g = grad_in_layout(layout, 4.0);
        fill_(g.select(0, pos / 5).select(0, pos % 5), bad);
        w.set_grad(g);
        const Tensor before = w.clone();
        scaler.unscale_(opt);
        EXPECT_FALSE(scaler.step(opt)) << "layout " << layout << " pos " << pos << " value " << bad;
        EXPECT_EQ(std::memcmp(w.data_ptr(), before.data_ptr(), w.nbytes()), 0) << "a skipped step moved w";
        scaler.update(4.0);  // keep inv_scale 0.25 for the next case
      }
  }
}

TEST(GradScalerContract, UnscaleThenClipWithNonFiniteGradSkips) {
  Tensor w = ones({4}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 8.0});
  w.set_grad(from_vector<float>({8.0f, kInf, 8.0f, 8.0f}));
  scaler.unscale_(opt);
  double norm = 0.0;
  EXPECT_NO_THROW(norm = clip_grad_norm_(opt.group_params(0), 1.0));
  EXPECT_FALSE(std::isfinite(norm));
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 4.0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w.data<float>()[i], 1.0f);
}

// Growth to a non-finite f32 scale is refused: 1e38 * 16 overflows f32.
TEST(GradScalerContract, WillNotOverflow) {
  GradScaler scaler({.init_scale = 1e38, .growth_factor = 16.0, .growth_interval = 1});
  Tensor w = zeros({1}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  w.set_grad(ones({1}));
  scaler.step(opt);
  scaler.update();
  EXPECT_TRUE(std::isfinite(scaler.get_scale()));
  EXPECT_EQ(scaler.get_scale(), double(1e38f));
}

// PyTorch's test_grad_scaling_update_scale sequence through a real f16 product: loss = sum(f16(w) * x).
TEST(GradScalerContract, F16ProductSequence) {
  Tensor w = ones({100}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 0.0});  // lr 0: only the scaler's bookkeeping matters here
  GradScaler scaler({.init_scale = 4.0});
  const double xs[] = {5, 20000, 5, 40000};
  const double grads[] = {20, kInf, 10, kInf};
  const double scales[] = {4, 2, 2, 1};
  const int64_t trackers[] = {1, 0, 1, 0};
  for (int i = 0; i < 4; ++i) {
    opt.zero_grad();
    Tensor x = full({100}, xs[i], {.dtype = DType::kF16});
    Tensor loss = sum(mul(w.to(DType::kF16), x));
    scaler.scale(loss).backward();
    EXPECT_EQ(w.grad().dtype(), DType::kF32);
    EXPECT_EQ(w.grad().data<float>()[17], grads[i]) << i;  // x * scale rounded to f16 (80000 -> inf)
    scaler.step(opt);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), scales[i]) << i;
    EXPECT_EQ(scaler.growth_tracker(), trackers[i]) << i;
  }
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GradScalerContract, MisuseThrows) {
  Tensor w = zeros({2}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  GradScaler scaler;
  w.set_grad(ones({2}));
  scaler.unscale_(opt);
  expect_error([&] { scaler.unscale_(opt); }, "unscale_() has already been called on this SGD optimizer");
  scaler.step(opt);
  expect_error([&] { scaler.unscale_(opt); }, "unscale_() is being called after step()");
  expect_error([&] { scaler.step(opt); }, "step() has already been called");
  scaler.update();
  expect_error([&] { scaler.update(); }, "no inf checks were recorded prior to update()");
  // 16-bit grads cannot reach the scaler: a grad has its parameter's dtype and the optimizers take fp32
  // (or f64) masters only, so the f16 case is refused one step earlier, when the optimizer is built.
  Tensor h = zeros({2}, {.dtype = DType::kF16, .requires_grad = true});
  expect_error([&] { SGD bad({{"h", h}}, {.lr = 1.0}); }, "master weights");
  // After update() the cycle starts again.
  scaler.unscale_(opt);
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
}

// PyTorch's step() asserts "No inf checks were recorded for this optimizer" when unscale_ found no grads
// at all; stepping silently would report an applied update that changed nothing.
TEST(GradScalerContract, StepWithoutAnyGradThrows) {
  Tensor w = ones({2, 3}, {.requires_grad = true});
  Tensor unused = ones({3}, {.requires_grad = true});
  Tensor x = ones({4, 3});
  const char* const kNeedle = "no inf checks were recorded for this SGD optimizer: none of its 2 parameters has a grad";
  {
    // The loss was scaled but backward never ran: the fused path has nothing to check.
    SGD opt({{"w", w}, {"unused", unused}}, {.lr = 1.0});
    GradScaler scaler;
    const Tensor loss = scaler.scale(sum(matmul(x, w.t())));
    expect_error([&] { scaler.step(opt); }, kNeedle);
    expect_error([&] { scaler.enqueue_step(opt); }, kNeedle);
    expect_error([&] { scaler.step(opt); }, "HINT: call backward() on scaler.scale(loss)");
    EXPECT_EQ(sum(w).item(), 6.0) << "nothing was stepped";
    expect_error([&] { scaler.update(); }, "no inf checks were recorded prior to update()");
    // Once the backward has run, the same scaler and optimizer step as usual.
    loss.backward();
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    EXPECT_FALSE(unused.grad().defined()) << "a parameter outside the graph is fine while another has a grad";
    EXPECT_LT(sum(w).item(), 6.0);
  }
  {
    // unscale_ accepts an optimizer without grads (as PyTorch's), and step() then refuses it.
    SGD opt({{"w", w}, {"unused", unused}}, {.lr = 1.0});
    opt.zero_grad();
    GradScaler scaler;
    scaler.unscale_(opt);
    expect_error([&] { scaler.step(opt); }, std::string(kNeedle) + " (unscale_ found none)");
  }
  {
    // A disabled scaler is a plain optimizer step (PyTorch's enabled=False skips every check).
    SGD opt({{"unused", unused}}, {.lr = 1.0});
    GradScaler scaler({.state = ScalerState::kDisabled});
    EXPECT_TRUE(scaler.step(opt));
  }
}

TEST(GradScalerContract, StateSaveLoad) {
  GradScaler a({.init_scale = 3.0, .growth_factor = 4.0, .backoff_factor = 0.5, .growth_interval = 2});
  Tensor w = zeros({1}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  w.set_grad(ones({1}));
  a.step(opt);
  a.update();  // tracker 1 in a; the saved state carries it
  GradScaler b;
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.get_scale(), 3.0);
  EXPECT_EQ(b.growth_factor(), 4.0);
  EXPECT_EQ(b.backoff_factor(), 0.5);
  EXPECT_EQ(b.growth_interval(), 2);
  EXPECT_EQ(b.growth_tracker(), 1);
  // PyTorch's check: a fresh scaler's state loads with tracker 0.
  GradScaler c({.init_scale = 3.0, .growth_factor = 4.0, .backoff_factor = 0.5, .growth_interval = 2}), d;
  d.load_state_dict(c.state_dict());
  EXPECT_EQ(d.get_scale(), 3.0);
  EXPECT_EQ(d.growth_factor(), 4.0);
  EXPECT_EQ(d.growth_tracker(), 0);
  expect_error([&] { d.load_state_dict({}); }, "the state is empty");
  GradScaler disabled({.state = ScalerState::kDisabled});
  EXPECT_TRUE(disabled.state_dict().empty());
  expect_error([&] { d.load_state_dict(disabled.state_dict()); }, "disabled GradScaler");
  auto bad = c.state_dict();
  bad["typo"] = 1.0;
  expect_error([&] { d.load_state_dict(bad); }, "unexpected entry 'typo'");
}

}  // namespace
}  // namespace mantissa::amp

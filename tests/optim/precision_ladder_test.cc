// The precision ladder (optim/precision_ladder.h, issue 36) on every optimizer: each rung is the optimizer's fp32
// update followed by its storage's rounding, bit for bit: a reference that runs the same CPU step on whole f32
// arrays and rounds them by hand (bf16 to nearest, the bf16 stochastic rule with the parameter's Philox stream, the
// Kahan rule, block-wise 8-bit quantization) must give the same bits step after step. Then what composes with it:
// the GradScaler's fused step (a skipped step changes nothing, including the compensation), state_dict /
// load_state_dict (resume bit for bit), and the refusals that name both settings. Finally what the rungs are for:
// a stream of small updates that rounding to nearest drops and stochastic rounding and Kahan keep, and an MLP
// trained with bf16 weights and 8-bit state under autocast.
#include "optim/precision_ladder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"
#include "optim/cpu/optim_kernels.h"
#include "optim/lion.h"
#include "optim/low_precision.h"
#include "optim/sgd.h"
#include "tests/support/error_of.h"

namespace mantissa {
namespace {

namespace lp = low_precision;
using ::testing::HasSubstr;

using testing::error_of;

#define EXPECT_THROW_MSG(statement, text) EXPECT_THAT(error_of([&] { (void)statement; }), HasSubstr(text))

constexpr int64_t kN = 5000;  // two whole 2048-blocks and a partial one

// ---- the reference: whole f32 arrays, the same CPU step, the storage's rounding by hand ----

// The f32 values of a ladder state tensor (f32, bf16, or 8-bit codes with their absmax).
std::vector<float> as_f32(const ParamState& s, const std::string& name) {
  const Tensor& t = s.at(name);
  std::vector<float> out(size_t(t.numel()));
  if (t.dtype() == DType::kU8) {
    const bool is_signed = name != "exp_avg_sq" && name != "max_exp_avg_sq";
    lp::dequantize_blockwise(t.data<uint8_t>(), s.at(name + ".absmax").data<float>(), t.numel(), lp::kQuantBlock,
                             is_signed, out.data());
  } else {
    const Tensor f = t.to(DType::kF32).contiguous();
    std::memcpy(out.data(), f.data<float>(), sizeof(float) * out.size());
  }
  return out;
}

std::vector<float> values_of(const Tensor& t) {
  const Tensor f = t.to(DType::kF32).contiguous();
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

float round_bf16(float x) { return lp::bf16_value(lp::bf16_nearest(x)); }

// Rounds a state array as `storage` keeps it.
void round_state(std::vector<float>& v, StateStorage storage, bool is_signed) {
  if (storage == StateStorage::kBf16) {
    for (float& x : v) x = round_bf16(x);
  } else if (storage == StateStorage::k8bit) {
    std::vector<uint8_t> codes(v.size());
    std::vector<float> absmax((v.size() + lp::kQuantBlock - 1) / lp::kQuantBlock);
    lp::quantize_blockwise(v.data(), int64_t(v.size()), lp::kQuantBlock, is_signed, codes.data(), absmax.data(),
                           is_signed ? lp::CodeRounding::kNearest : lp::CodeRounding::kUp);
    lp::dequantize_blockwise(codes.data(), absmax.data(), int64_t(v.size()), lp::kQuantBlock, is_signed, v.data());
  }
}

// One optimizer under test: how to make it, its state's names (signed or not), and its CPU step on f32 arrays.
struct Subject {
  std::string name;
  std::function<std::unique_ptr<Optimizer>(std::vector<NamedTensor>, PrecisionLadder)> make;
  std::vector<std::string> buffers;
  std::function<void(float* p, const float* g, std::vector<std::vector<float>>& s, int64_t* step)> reference;
};

std::vector<Subject> subjects() {
  const AdamOptions adam{.lr = 1e-2, .weight_decay = 1e-3};
  const AdamWOptions adamw{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true};
  const SGDOptions sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true};
  const LionOptions lion{.lr = 1e-3, .weight_decay = 0.1};
  return {
      {"Adam",
       [=](std::vector<NamedTensor> p, PrecisionLadder l) { return std::make_unique<Adam>(std::move(p), adam, l); },
       {"exp_avg", "exp_avg_sq"},
       [=](float* p, const float* g, auto& s, int64_t* step) {
         cpu::adam_step<float>({p, g, s[0].data(), s[1].data(), nullptr, step, kN}, adam, cpu::WeightDecay::kL2, {});
       }},
      {"AdamW",
       [=](std::vector<NamedTensor> p, PrecisionLadder l) { return std::make_unique<AdamW>(std::move(p), adamw, l); },
       {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
       [=](float* p, const float* g, auto& s, int64_t* step) {
         cpu::adam_step<float>({p, g, s[0].data(), s[1].data(), s[2].data(), step, kN}, adamw.as_adam(),
                               cpu::WeightDecay::kDecoupled, {});
       }},
      {"SGD",
       [=](std::vector<NamedTensor> p, PrecisionLadder l) { return std::make_unique<SGD>(std::move(p), sgd, l); },
       {"momentum_buffer"},
       [=](float* p, const float* g, auto& s, int64_t* step) {
         cpu::sgd_step<float>({p, g, s[0].data(), step, kN}, sgd, {});
       }},
      {"Lion",
       [=](std::vector<NamedTensor> p, PrecisionLadder l) { return std::make_unique<Lion>(std::move(p), lion, l); },
       {"exp_avg"},
       [=](float* p, const float* g, auto& s, int64_t* step) {
         cpu::lion_step<float>({p, g, s[0].data(), step, kN}, lion, {});
       }},
  };
}

std::vector<PrecisionLadder> rungs() {
  std::vector<PrecisionLadder> out;
  for (StateStorage st : {StateStorage::kFp32, StateStorage::kBf16, StateStorage::k8bit}) {
    if (st != StateStorage::kFp32) out.push_back({.optimizer_state = st});  // fp32 masters, compressed state
    for (UpdateRounding r : {UpdateRounding::kNearest, UpdateRounding::kStochastic, UpdateRounding::kKahan})
      out.push_back({.master_weights = MasterWeights::kNone, .update_rounding = r, .optimizer_state = st, .seed = 7});
  }
  return out;
}

Tensor random_values(Generator& gen, DType dtype, double scale) { return (randn({kN}, {}, &gen) * scale).to(dtype); }

class LadderEqualsTheRoundedFp32Update : public ::testing::TestWithParam<std::tuple<int /*subject*/, int /*rung*/>> {};

TEST_P(LadderEqualsTheRoundedFp32Update, BitForBitOverSteps) {
  const Subject subject = subjects()[size_t(std::get<0>(GetParam()))];
  const PrecisionLadder ladder = rungs()[size_t(std::get<1>(GetParam()))];
  SCOPED_TRACE(subject.name + " under " + ladder.str());
  const bool masters = ladder.master_weights == MasterWeights::kFp32;
  const DType dtype = masters ? DType::kF32 : DType::kBF16;
  Generator gen(21);
  Tensor w = random_values(gen, dtype, 0.5);
  w.set_requires_grad(true);
  auto opt = subject.make({{"w", w}}, ladder);

  std::vector<float> p = values_of(w);
  std::vector<std::vector<float>> state(subject.buffers.size(), std::vector<float>(size_t(kN), 0.0f));
  std::vector<uint16_t> compensation(size_t(kN), 0);
  int64_t step = 0;
  for (int s = 1; s <= 6; ++s) {
    const Tensor g = random_values(gen, dtype, 0.1 * s);
    w.set_grad(g);
    opt->step();

    const std::vector<float> gv = values_of(g);
    std::vector<float> next = p;
    subject.reference(next.data(), gv.data(), state, &step);
    for (size_t j = 0; j < state.size(); ++j) {
      const std::string& b = subject.buffers[j];
      round_state(state[j], ladder.optimizer_state, b != "exp_avg_sq" && b != "max_exp_avg_sq");
    }
    if (!masters) {
      for (int64_t i = 0; i < kN; ++i) {
        uint16_t bits = lp::bf16_nearest(p[size_t(i)]);  // p holds a bf16 value exactly
        switch (ladder.update_rounding) {
          case UpdateRounding::kNearest: bits = lp::bf16_nearest(next[size_t(i)]); break;
          case UpdateRounding::kStochastic:
            bits = lp::bf16_stochastic(next[size_t(i)],
                                       lp::update_random(ladder.seed, ladder_stream("w"), uint32_t(s), uint64_t(i)));
            break;
          case UpdateRounding::kKahan: lp::kahan_bf16(bits, compensation[size_t(i)], next[size_t(i)]); break;
        }
        next[size_t(i)] = lp::bf16_value(bits);
      }
    }
    p = next;

    ASSERT_EQ(step, s);
    const ParamState& st = *opt->state("w");
    EXPECT_EQ(st.at("step").item<int64_t>(), s);
    const std::vector<float> got = values_of(w);
    int64_t param_diffs = 0;
    for (int64_t i = 0; i < kN; ++i) param_diffs += std::memcmp(&got[size_t(i)], &p[size_t(i)], 4) != 0;
    EXPECT_EQ(param_diffs, 0) << "step " << s << ": weights that differ from the rounded fp32 update";
    for (size_t j = 0; j < state.size(); ++j) {
      const std::vector<float> sv = as_f32(st, subject.buffers[j]);
      int64_t diffs = 0;
      for (int64_t i = 0; i < kN; ++i) diffs += std::memcmp(&sv[size_t(i)], &state[j][size_t(i)], 4) != 0;
      EXPECT_EQ(diffs, 0) << "step " << s << ": " << subject.buffers[j] << " values that differ";
    }
    if (ladder.update_rounding == UpdateRounding::kKahan && !masters) {
      const Tensor& c = st.at("compensation");
      EXPECT_EQ(std::memcmp(c.data_ptr(), compensation.data(), compensation.size() * 2), 0) << "compensation";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOptimizerAndRung, LadderEqualsTheRoundedFp32Update,
                         ::testing::Combine(::testing::Range(0, 4), ::testing::Range(0, 11)), [](const auto& info) {
                           const PrecisionLadder l = rungs()[size_t(std::get<1>(info.param))];
                           std::string name = subjects()[size_t(std::get<0>(info.param))].name + "_" +
                                              master_weights_name(l.master_weights) + "_";
                           if (l.master_weights == MasterWeights::kNone)
                             name += std::string(update_rounding_name(l.update_rounding)) + "_";
                           return name + "state" + state_storage_name(l.optimizer_state);
                         });

TEST(PrecisionLadder, RungsCount) { EXPECT_EQ(rungs().size(), 11u); }

// ---- composition ----

struct Ladders {
  static PrecisionLadder stochastic_8bit() {
    return {.master_weights = MasterWeights::kNone,
            .update_rounding = UpdateRounding::kStochastic,
            .optimizer_state = StateStorage::k8bit,
            .seed = 3};
  }
  static PrecisionLadder kahan_bf16() {
    return {.master_weights = MasterWeights::kNone,
            .update_rounding = UpdateRounding::kKahan,
            .optimizer_state = StateStorage::kBf16};
  }
};

Tensor bf16_leaf(Generator& gen) {
  Tensor w = random_values(gen, DType::kBF16, 0.5);
  w.set_requires_grad(true);
  return w;
}

bool same_state(const Optimizer& a, const Optimizer& b, const std::string& name) {
  const ParamState& x = *a.state(name);
  const ParamState& y = *b.state(name);
  if (x.size() != y.size()) return false;
  for (const auto& [k, t] : x) {
    const Tensor& u = y.at(k);
    if (t.dtype() != u.dtype() || t.shape() != u.shape() || std::memcmp(t.data_ptr(), u.data_ptr(), t.nbytes()) != 0)
      return false;
  }
  return true;
}

TEST(PrecisionLadder, ScaledStepIsTheUnscaledStepAndASkippedStepChangesNothing) {
  for (const PrecisionLadder& ladder : {Ladders::stochastic_8bit(), Ladders::kahan_bf16()}) {
    SCOPED_TRACE(ladder.str());
    Generator gen(4);
    Tensor a = bf16_leaf(gen), b = a.detach().clone();
    b.set_requires_grad(true);
    Adam plain({{"w", a}}, {.lr = 1e-2}, ladder), fused({{"w", b}}, {.lr = 1e-2}, ladder);
    for (int s = 0; s < 3; ++s) {
      const Tensor g = random_values(gen, DType::kBF16, 0.1);
      a.set_grad(g);
      plain.step();
      b.set_grad((g.to(DType::kF32) * 1024.0).to(DType::kBF16));  // exact: a power of two
      fused.step({.inv_scale = scalar_tensor(1.0 / 1024.0), .found_inf = scalar_tensor(0.0)});
    }
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << "weights";
    EXPECT_TRUE(same_state(plain, fused, "w"));
    // found_inf: nothing moves, not the step count, the weights, the codes or the compensation.
    const Tensor before = b.detach().clone();
    const OptimizerState saved = fused.state_dict();
    b.set_grad(random_values(gen, DType::kBF16, 0.1));
    fused.step({.inv_scale = scalar_tensor(1.0), .found_inf = scalar_tensor(1.0)});
    EXPECT_EQ(std::memcmp(before.data_ptr(), b.data_ptr(), b.nbytes()), 0);
    for (const auto& [key, t] : saved.tensors) {
      const auto k = split_state_key("Adam", key);
      const Tensor& now = fused.state(k.param)->at(k.state);
      EXPECT_EQ(std::memcmp(t.data_ptr(), now.data_ptr(), t.nbytes()), 0) << key;
    }
  }
}

TEST(PrecisionLadder, ResumeFromStateDictIsBitForBit) {
  for (const PrecisionLadder& ladder : {Ladders::stochastic_8bit(), Ladders::kahan_bf16()}) {
    SCOPED_TRACE(ladder.str());
    Generator gen(8);
    Tensor w = bf16_leaf(gen);
    AdamW run({{"w", w}}, {.lr = 1e-2}, ladder);
    std::vector<Tensor> grads;
    for (int s = 0; s < 6; ++s) grads.push_back(random_values(gen, DType::kBF16, 0.1));
    for (int s = 0; s < 3; ++s) {
      w.set_grad(grads[size_t(s)]);
      run.step();
    }
    const OptimizerState saved = run.state_dict();
    EXPECT_EQ(saved.ladder, ladder.str());
    Tensor w2 = w.detach().clone();
    w2.set_requires_grad(true);
    AdamW resumed({{"w", w2}}, {.lr = 1e-2}, ladder);
    resumed.load_state_dict(saved);
    for (int s = 3; s < 6; ++s) {
      w.set_grad(grads[size_t(s)]);
      run.step();
      w2.set_grad(grads[size_t(s)]);
      resumed.step();
    }
    EXPECT_EQ(std::memcmp(w.data_ptr(), w2.data_ptr(), w.nbytes()), 0) << "weights after resuming";
    EXPECT_TRUE(same_state(run, resumed, "w"));
  }
}

// ZeRO-1's optimizer side (Optimizer::shard): a shard that starts at a block boundary draws the whole parameter's
// random numbers and quantizes the whole parameter's blocks, so its elements, codes and absmax are the whole run's.
TEST(PrecisionLadder, AShardStepsAsTheWholeParameterDoes) {
  Generator gen(12);
  Tensor whole = bf16_leaf(gen);
  Tensor part = whole.detach().clone();
  part.set_requires_grad(true);
  AdamW a({{"w", whole}}, {.lr = 1e-2}, Ladders::stochastic_8bit());
  AdamW b({{"w", part}}, {.lr = 1e-2}, Ladders::stochastic_8bit());
  constexpr int64_t kBegin = 2048;  // the second block; the shard runs to the end (a partial last block)
  b.shard({{"w", {.begin = kBegin, .end = kN}}});
  Tensor leaf = b.group_params(0).front().tensor;
  for (int s = 0; s < 4; ++s) {
    const Tensor g = random_values(gen, DType::kBF16, 0.1);
    whole.set_grad(g);
    leaf.set_grad(g.narrow(0, kBegin, kN - kBegin).contiguous());
    a.step();
    b.step();
  }
  auto same = [](const Tensor& x, const Tensor& y) {
    const Tensor cx = x.contiguous(), cy = y.contiguous();
    return cx.nbytes() == cy.nbytes() && std::memcmp(cx.data_ptr(), cy.data_ptr(), cx.nbytes()) == 0;
  };
  EXPECT_TRUE(same(whole.detach().narrow(0, kBegin, kN - kBegin), leaf.detach())) << "weights";
  const ParamState& sa = *a.state("w");
  const ParamState& sb = *b.state("w");
  for (const char* m : {"exp_avg", "exp_avg_sq"}) {
    EXPECT_TRUE(same(sa.at(m).narrow(0, kBegin, kN - kBegin), sb.at(m))) << m;
    const std::string absmax = std::string(m) + ".absmax";
    EXPECT_TRUE(same(sa.at(absmax).narrow(0, 1, 2), sb.at(absmax))) << absmax;
  }

  AdamW c({{"w", bf16_leaf(gen)}}, {}, Ladders::kahan_bf16());
  EXPECT_THROW_MSG(c.shard({{"w", {.begin = 1000, .end = kN}}}),
                   "range [1000, 5000) of parameter 'w' starts inside a 2048-element block of the precision ladder "
                   "(master_weights=none update_rounding=kahan optimizer_state=bf16)");
}

// ---- refusals: one line naming both settings; nothing changes ----

TEST(PrecisionLadder, RefusesWhatCannotWork) {
  Generator gen(2);
  Tensor f32 = random_values(gen, DType::kF32, 1.0), bf16 = bf16_leaf(gen), f16 = random_values(gen, DType::kF16, 1.0);
  f32.set_requires_grad(true);
  f16.set_requires_grad(true);
  EXPECT_THROW_MSG((Adam({{"w", bf16}}, {})), "parameter 'w' is bf16 [5000]; with master_weights=fp32");
  EXPECT_THROW_MSG((Adam({{"w", f32}}, {}, {.master_weights = MasterWeights::kNone})),
                   "parameter 'w' is f32 [5000]; master_weights=none updates bf16 weights");
  EXPECT_THROW_MSG((Adam({{"w", f16}}, {}, {.master_weights = MasterWeights::kNone})),
                   "f16 weights without masters are not supported");
  EXPECT_THROW_MSG((Adam({{"w", f32}}, {}, {.update_rounding = UpdateRounding::kStochastic})),
                   "update_rounding=stochastic rounds updates into bf16 weights, but master_weights=fp32");
  EXPECT_THROW_MSG((SGD({{"w", f32}}, {.lr = 0.1}, {.optimizer_state = StateStorage::k8bit})),
                   "optimizer_state=8bit stores the momentum buffer, but momentum=0");

  // A state written under another rung: refused before anything is loaded.
  AdamW writer({{"w", bf16}}, {}, Ladders::kahan_bf16());
  bf16.set_grad(random_values(gen, DType::kBF16, 0.1));
  writer.step();
  Tensor other = bf16.detach().clone();
  other.set_requires_grad(true);
  AdamW reader({{"w", other}}, {}, Ladders::stochastic_8bit());
  other.set_grad(random_values(gen, DType::kBF16, 0.1));
  reader.step();
  const OptimizerState before = reader.state_dict();
  EXPECT_THROW_MSG(reader.load_state_dict(writer.state_dict()),
                   "the state was written under master_weights=none update_rounding=kahan optimizer_state=bf16, this "
                   "optimizer runs under master_weights=none update_rounding=stochastic optimizer_state=8bit seed=3");
  const OptimizerState after = reader.state_dict();
  for (const auto& [key, t] : before.tensors)
    EXPECT_EQ(std::memcmp(t.data_ptr(), after.tensors.at(key).data_ptr(), t.nbytes()), 0) << key;
}

TEST(PrecisionLadder, SavedFormRoundTripsAndIsCanonical) {
  for (const PrecisionLadder& l : rungs()) {
    const auto back = parse_precision_ladder(l.str());
    ASSERT_TRUE(back.has_value()) << l.str();
    if (l.update_rounding == UpdateRounding::kStochastic || l.master_weights == MasterWeights::kFp32) {
      EXPECT_EQ(back->str(), l.str());
    }
  }
  EXPECT_EQ(PrecisionLadder{}.str(), "master_weights=fp32 optimizer_state=fp32");
  EXPECT_FALSE(parse_precision_ladder("master_weights=fp32"));
  EXPECT_FALSE(parse_precision_ladder("master_weights=half optimizer_state=fp32"));
  EXPECT_FALSE(parse_precision_ladder("master_weights=fp32 update_rounding=nearest optimizer_state=fp32"));
}

TEST(PrecisionLadder, BytesPerParameter) {
  // Adam with fp32 masters and a bf16 working copy: 4 + 2 + 4 (f32 grads) + 8.
  EXPECT_EQ(PrecisionLadder{}.bytes_per_parameter(2, true).total(), 18.0);
  // bf16 weights, Kahan, 8-bit moments: 2 + 2 (bf16 grads) + 2 x (1 + 4/2048) + 2.
  const PrecisionLadder small{.master_weights = MasterWeights::kNone,
                              .update_rounding = UpdateRounding::kKahan,
                              .optimizer_state = StateStorage::k8bit};
  EXPECT_DOUBLE_EQ(small.bytes_per_parameter(2, true).total(), 2 + 2 + 2 * (1 + 4.0 / 2048) + 2);
}

// ---- what the rungs are for ----

// 2000 updates of -1e-4 onto 1.0 (SGD, grad 1, lr 1e-4): bf16's ulp at 1 is 2^-7 (2^-8 below 1), 20 to 40 times the
// update, so rounding to nearest never moves; stochastic rounding and Kahan end near 0.8, the exact sum.
TEST(PrecisionLadder, SmallUpdatesStallUnderNearestAndAddUpUnderStochasticAndKahan) {
  auto run = [](UpdateRounding r) {
    Tensor w = full({4096}, 1.0, {.dtype = DType::kBF16});
    w.set_requires_grad(true);
    SGD opt({{"w", w}}, {.lr = 1e-4}, {.master_weights = MasterWeights::kNone, .update_rounding = r, .seed = 5});
    const Tensor g = full({4096}, 1.0, {.dtype = DType::kBF16});
    for (int s = 0; s < 2000; ++s) {
      w.set_grad(g);
      opt.step();
    }
    return values_of(w);
  };
  const double exact = 1.0 - 2000 * double(float(1e-4));
  const std::vector<float> nearest = run(UpdateRounding::kNearest);
  EXPECT_EQ(nearest.front(), 1.0f) << "every update is below half an ulp";
  for (UpdateRounding r : {UpdateRounding::kStochastic, UpdateRounding::kKahan}) {
    const std::vector<float> v = run(r);
    double mean = 0;
    for (float x : v) mean += x / double(v.size());
    // Kahan: every weight within an ulp (2^-8 below 1) of the sum; stochastic: the mean within its standard error.
    if (r == UpdateRounding::kKahan) {
      for (float x : v) ASSERT_NEAR(x, exact, 1.0 / 256) << "kahan";
    } else {
      EXPECT_NEAR(mean, exact, 0.002) << "stochastic: the mean of 4096 weights";
    }
  }
}

// An 8-16-4 MLP with bf16 weights (Module::to), trained under bf16 autocast: the ladder's rungs all learn.
TEST(PrecisionLadder, AnMlpWithBf16WeightsLearnsUnderEveryRoundingAnd8BitState) {
  for (UpdateRounding r : {UpdateRounding::kNearest, UpdateRounding::kStochastic, UpdateRounding::kKahan}) {
    manual_seed(11);
    Sequential model(std::make_shared<Linear>(8, 16), std::make_shared<ReLU>(), std::make_shared<Linear>(16, 4));
    model.to(DType::kBF16);
    for (const auto& p : model.named_parameters()) {
      ASSERT_EQ(p.tensor.dtype(), DType::kBF16) << p.name;
      ASSERT_TRUE(p.tensor.is_leaf() && p.tensor.requires_grad()) << p.name;
    }
    AdamW opt(model.named_parameters(), {.lr = 1e-2},
              {.master_weights = MasterWeights::kNone,
               .update_rounding = r,
               .optimizer_state = StateStorage::k8bit,
               .seed = 1});
    Generator gen(5);
    const Tensor x = randn({32, 8}, {}, &gen);
    std::vector<int64_t> labels(32);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i % 4);
    const Tensor y = from_vector<int64_t>(labels, {32});
    double first = 0, last = 0;
    for (int s = 0; s < 60; ++s) {
      opt.zero_grad();
      Tensor loss;
      {
        amp::AutocastGuard guard({.dtype = DType::kBF16});
        loss = cross_entropy(model.forward(x), y);
      }
      loss.backward();
      for (const auto& p : model.named_parameters()) ASSERT_EQ(p.tensor.grad().dtype(), DType::kBF16) << p.name;
      opt.step();
      (s == 0 ? first : last) = loss.item();
    }
    EXPECT_LT(last, 0.7 * first) << update_rounding_name(r) << ": loss " << first << " -> " << last;
  }
}

}  // namespace
}  // namespace mantissa

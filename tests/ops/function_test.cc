// Custom functions (ops/function.h): first and second derivatives by gradcheck and gradgradcheck, saved
// outputs without a reference cycle, non-Tensor arguments, non-differentiable and unused outputs, inputs
// returned as outputs, every error a wrong backward deserves; custom_fwd / custom_bwd under autocast, and
// an op of the user's own given a category in the autocast policy (amp::register_op).
#include "ops/function.h"

#include <gtest/gtest.h>

#include <any>
#include <memory>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/error.h"
#include "ops/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/recompute/recompute.h"
#include "ops/reduce/reduce.h"
#include "ops/softmax/softmax.h"
#include "tests/ops/op_test_support.h"
#include "tests/support/gradcheck.h"

namespace mantissa {
namespace {

using testing::random_tensor;
using testing::values;

// alpha * tanh(x), saving its output: the example in ops/function.h's opening comment.
struct ScaledTanh : Function<ScaledTanh> {
  static constexpr std::string_view name = "ScaledTanh";
  static Tensor forward(FunctionContext& ctx, const Tensor& x, double alpha) {
    Tensor y = tanh(x) * alpha;
    ctx.save_for_backward({y});
    ctx.saved_data["alpha"] = alpha;
    return y;
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
    const Tensor y = ctx.saved_tensors()[0];
    const double alpha = std::any_cast<double>(ctx.saved_data.at("alpha"));
    return {grads[0] * (alpha - y * y / alpha), Tensor()};
  }
};

// x @ w and exp(x) as two outputs, saving an input, an output and nothing else: the backward differentiates
// both, so the create_graph path sees saved inputs with history and saved outputs relinked.
struct MatmulExp : Function<MatmulExp> {
  static constexpr std::string_view name = "MatmulExp";
  static std::vector<Tensor> forward(FunctionContext& ctx, const Tensor& x, const Tensor& w) {
    Tensor e = exp(x);
    ctx.save_for_backward({x, w, e});
    return {matmul(x, w), e};
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
    const std::vector<Tensor> saved = ctx.saved_tensors();
    const Tensor &x = saved[0], &w = saved[1], &e = saved[2];
    Tensor gx = matmul(grads[0], w.transpose(0, 1)) + grads[1] * e;
    Tensor gw = matmul(x.transpose(0, 1), grads[0]);
    return {ctx.needs_input_grad(0) ? gx : Tensor(), ctx.needs_input_grad(1) ? gw : Tensor()};
  }
};

TEST(Function, FirstDerivativesPassGradcheck) {
  const Tensor x = random_tensor({3, 4}, 1);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return ScaledTanh::apply(in[0], 1.5); }, {x}));
  const Tensor w = random_tensor({4, 2}, 2);
  const auto both = [](const std::vector<Tensor>& in) {
    const std::vector<Tensor> out = MatmulExp::apply(in[0], in[1]);
    return sum(out[0]) * 0.5 + sum(out[1] * out[1]);
  };
  EXPECT_TRUE(testing::gradcheck(both, {x, w}, {.layouts = {testing::InputLayout::kContiguous}}));
}

TEST(Function, SecondDerivativesPassGradgradcheck) {
  const Tensor x = random_tensor({3, 4}, 3);
  EXPECT_TRUE(testing::gradgradcheck([](const std::vector<Tensor>& in) { return ScaledTanh::apply(in[0], -0.7); }, {x},
                                     {.layouts = {testing::InputLayout::kContiguous}}));
  const Tensor w = random_tensor({4, 2}, 4);
  const auto first = [](const std::vector<Tensor>& in) { return MatmulExp::apply(in[0], in[1])[0]; };
  const auto second = [](const std::vector<Tensor>& in) { return MatmulExp::apply(in[0], in[1])[1]; };
  EXPECT_TRUE(testing::gradgradcheck(first, {x, w}, {.layouts = {testing::InputLayout::kContiguous}}));
  EXPECT_TRUE(testing::gradgradcheck(second, {x, w}, {.layouts = {testing::InputLayout::kContiguous}}));
}

TEST(Function, TheNodeIsNamedAndFreedWithItsOutputs) {
  Tensor x = random_tensor({5}, 5, DType::kF32);
  x.set_requires_grad(true);
  std::weak_ptr<Node> node;
  {
    Tensor y = ScaledTanh::apply(x, 2.0);
    ASSERT_TRUE(y.requires_grad());
    EXPECT_EQ(y.grad_fn()->name(), "ScaledTanhBackward");
    node = y.grad_fn();
  }
  EXPECT_TRUE(node.expired()) << "the saved output must not keep its own node alive";
}

TEST(Function, WithoutGradNothingIsRecorded) {
  const Tensor x = random_tensor({5}, 6, DType::kF32);  // no requires_grad
  EXPECT_FALSE(ScaledTanh::apply(x, 2.0).requires_grad());
  Tensor p = random_tensor({5}, 7, DType::kF32);
  p.set_requires_grad(true);
  NoGradGuard no_grad;
  EXPECT_FALSE(ScaledTanh::apply(p, 2.0).requires_grad());
}

TEST(Function, ABackwardThroughAFreedGraphThrows) {
  Tensor x = random_tensor({4}, 8, DType::kF32);
  x.set_requires_grad(true);
  Tensor loss = sum(ScaledTanh::apply(x, 1.0));
  loss.backward();
  try {
    loss.backward();
    FAIL() << "a second backward through a freed graph must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ScaledTanhBackward"), std::string::npos) << e.what();
  }
}

// Two outputs, one of them an index (never differentiable) and one marked; an unused output's gradient is
// zeros by default and undefined after set_materialize_grads(false).
struct TopAndMask : Function<TopAndMask> {
  static constexpr std::string_view name = "TopAndMask";
  static std::vector<Tensor> forward(FunctionContext& ctx, const Tensor& x, bool materialize) {
    ctx.set_materialize_grads(materialize);
    Tensor mask = gt(x, 0.0).to(DType::kF32);
    ctx.mark_non_differentiable({mask});
    ctx.save_for_backward({mask});
    return {x * 2.0, x * 3.0, argmax(x, 0), mask};
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
    EXPECT_EQ(grads.size(), 4u);
    seen.assign(grads.begin(), grads.end());
    Tensor g = grads[0].defined() ? grads[0] * 2.0 : Tensor();
    if (grads[1].defined()) g = g.defined() ? g + grads[1] * 3.0 : grads[1] * 3.0;
    EXPECT_FALSE(ctx.saved_tensors()[0].requires_grad());
    return {g, Tensor()};
  }
  static inline std::vector<Tensor> seen;
};

TEST(Function, UnusedAndNonDifferentiableOutputs) {
  for (bool materialize : {true, false}) {
    SCOPED_TRACE(materialize ? "materialized" : "not materialized");
    Tensor x = random_tensor({6}, 9, DType::kF32);
    x.set_requires_grad(true);
    const std::vector<Tensor> out = TopAndMask::apply(x, materialize);
    EXPECT_TRUE(out[0].requires_grad());
    EXPECT_TRUE(out[1].requires_grad());
    EXPECT_FALSE(out[2].requires_grad()) << "an integer output has no gradient";
    EXPECT_FALSE(out[3].requires_grad()) << "a marked output has no gradient";
    sum(out[0]).backward();  // out[1] unused
    ASSERT_EQ(TopAndMask::seen.size(), 4u);
    EXPECT_EQ(TopAndMask::seen[1].defined(), materialize);
    if (materialize) {
      EXPECT_EQ(values(TopAndMask::seen[1]), std::vector<double>(6, 0.0));
    }
    EXPECT_FALSE(TopAndMask::seen[2].defined()) << "an integer output gets no zeros";
    EXPECT_EQ(values(x.grad()), std::vector<double>(6, 2.0));
  }
}

// Returns its input unchanged: the output is a new handle with the history, the input keeps its own.
struct Identity : Function<Identity> {
  static Tensor forward(FunctionContext&, const Tensor& x) { return x; }
  static std::vector<Tensor> backward(FunctionContext&, std::vector<Tensor> grads) { return {grads[0] * 4.0}; }
};

TEST(Function, AnInputReturnedAsItIsGetsANewHandle) {
  Tensor x = random_tensor({3}, 10, DType::kF32);
  x.set_requires_grad(true);
  Tensor y = Identity::apply(x);
  EXPECT_FALSE(y.is_same(x));
  EXPECT_TRUE(x.is_leaf()) << "the input keeps its own history";
  EXPECT_EQ(y.grad_fn()->name(), "FunctionBackward");
  EXPECT_EQ(values(y), values(x));
  sum(y).backward();
  EXPECT_EQ(values(x.grad()), std::vector<double>(3, 4.0));
}

// Backwards that break the contract, one per error.
enum class Wrong { kCount, kShape, kNonTensorArgument, kIntegerGradient, kDtype };
struct Misbehaving : Function<Misbehaving> {
  static constexpr std::string_view name = "Misbehaving";
  static Tensor forward(FunctionContext& ctx, const Tensor& x, Wrong wrong) {
    ctx.saved_data["wrong"] = wrong;
    return x * 1.0;
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
    switch (std::any_cast<Wrong>(ctx.saved_data.at("wrong"))) {
      case Wrong::kCount: return {grads[0]};
      case Wrong::kShape: return {sum(grads[0]), Tensor()};
      case Wrong::kNonTensorArgument: return {grads[0], grads[0]};
      case Wrong::kIntegerGradient: return {grads[0].to(DType::kI64), Tensor()};
      case Wrong::kDtype: return {grads[0].to(DType::kF64), Tensor()};
    }
    return {};
  }
};

std::string backward_error(Wrong wrong) {
  Tensor x = random_tensor({2, 3}, 11, DType::kF32);
  x.set_requires_grad(true);
  try {
    sum(Misbehaving::apply(x, wrong)).backward();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Function, AWrongBackwardIsNamed) {
  EXPECT_EQ(backward_error(Wrong::kCount),
            "Misbehaving: backward returned 1 gradients, but forward took 2 arguments. HINT: return one per forward "
            "argument, an undefined Tensor() for those that are not Tensors or need none");
  EXPECT_EQ(backward_error(Wrong::kShape),
            "Misbehaving: backward returned a gradient of shape [] for argument 0, whose shape is [2, 3]. HINT: a "
            "broadcast input's gradient is summed back to its shape (sum_to)");
  EXPECT_EQ(backward_error(Wrong::kNonTensorArgument),
            "Misbehaving: backward returned a gradient for argument 1, which is not a Tensor. HINT: return an "
            "undefined Tensor() there");
  EXPECT_EQ(backward_error(Wrong::kIntegerGradient),
            "Misbehaving: backward returned a i64 gradient for argument 0; gradients are floating");
  // Another floating dtype is converted to the input's, as PyTorch does.
  EXPECT_EQ(backward_error(Wrong::kDtype), "");
}

struct SavesTwice : Function<SavesTwice> {
  static Tensor forward(FunctionContext& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    ctx.save_for_backward({x});
    return x * 2.0;
  }
  static std::vector<Tensor> backward(FunctionContext&, std::vector<Tensor> grads) { return {grads[0]}; }
};

TEST(Function, ContextMisuseThrows) {
  Tensor x = random_tensor({2}, 12, DType::kF32);
  x.set_requires_grad(true);
  EXPECT_THROW(SavesTwice::apply(x), Error);
}

// once_differentiable: first order works; create_graph through it is refused.
struct FirstOrderOnly : Function<FirstOrderOnly> {
  static constexpr std::string_view name = "FirstOrderOnly";
  static constexpr FunctionOptions options{.once_differentiable = true};
  static Tensor forward(FunctionContext& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x * x;
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
    return {grads[0] * ctx.saved_tensors()[0] * 2.0};
  }
};

TEST(Function, OnceDifferentiableRefusesCreateGraph) {
  Tensor x = random_tensor({3}, 13, DType::kF32);
  x.set_requires_grad(true);
  const Tensor g = grad(sum(FirstOrderOnly::apply(x)), {x})[0];
  EXPECT_EQ(values(g), values(x * 2.0));
  try {
    grad(sum(FirstOrderOnly::apply(x)), {x}, {.create_graph = true});
    FAIL() << "create_graph through a once_differentiable function must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FirstOrderOnlyBackward does not support create_graph"), std::string::npos)
        << e.what();
  }
}

// Saves an intermediate (tanh(x), not returned): first order is right, create_graph is refused, since the
// intermediate has no history to differentiate through.
struct SavesIntermediate : Function<SavesIntermediate> {
  static constexpr std::string_view name = "SavesIntermediate";
  static Tensor forward(FunctionContext& ctx, const Tensor& x) {
    Tensor t = tanh(x);
    ctx.save_for_backward({t});
    return t * 3.0;
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
    const Tensor t = ctx.saved_tensors()[0];
    return {grads[0] * (1.0 - t * t) * 3.0};
  }
};

TEST(Function, ASavedIntermediateRefusesCreateGraph) {
  const Tensor x = random_tensor({3, 2}, 14);
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) { return SavesIntermediate::apply(in[0]); }, {x}));
  Tensor p = x.detach();
  p.set_requires_grad(true);
  try {
    grad(sum(SavesIntermediate::apply(p)), {p}, {.create_graph = true});
    FAIL() << "create_graph through a saved intermediate must throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("SavesIntermediateBackward cannot differentiate its gradient", 0), 0u)
        << e.what();
  }
}

// ---- autocast ----

// What the forward and the backward saw: the dtypes of the inputs and whether autocast was on.
struct Seen {
  DType forward_input = DType::kF32;
  bool forward_autocast = false;
  DType matmul_out = DType::kF32;
  bool backward_autocast = false;
  DType backward_dtype = DType::kF32;
};

template <typename Options>
struct Probe : Function<Probe<Options>> {
  static constexpr FunctionOptions options = Options::value;
  static inline Seen seen;
  static Tensor forward(FunctionContext& ctx, const Tensor& a, const Tensor& b) {
    seen.forward_input = a.dtype();
    seen.forward_autocast = amp::is_enabled(DeviceType::kCPU);
    ctx.save_for_backward({a, b});
    Tensor out = matmul(a, b);  // lower precision under autocast, when autocast is on here
    seen.matmul_out = out.dtype();
    return out;
  }
  static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
    seen.backward_autocast = amp::is_enabled(DeviceType::kCPU);
    seen.backward_dtype = amp::lower_precision_dtype(DeviceType::kCPU);
    // Without custom_bwd the gradient is in the forward's output dtype (bf16 under autocast) while the saved
    // inputs are as given: the backward must cast by hand, which custom_bwd exists to spare it.
    const std::vector<Tensor> s = ctx.saved_tensors();
    const Tensor& g = grads[0];
    return {matmul(g, s[1].transpose(0, 1).to(g.dtype())), matmul(s[0].transpose(0, 1).to(g.dtype()), g)};
  }
};
struct Plain {
  static constexpr FunctionOptions value{};
};
struct CustomBwd {
  static constexpr FunctionOptions value{.backward_autocast = BackwardAutocast::kAsForward};
};
struct CastToF32 {
  static constexpr FunctionOptions value{.cast_inputs = DType::kF32, .backward_autocast = BackwardAutocast::kAsForward};
};

template <typename Options>
Seen probe(std::optional<DType> autocast, DType input_dtype, Tensor* a_grad = nullptr) {
  Tensor a = random_tensor({4, 3}, 20, input_dtype), b = random_tensor({3, 2}, 21, input_dtype);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor out;
  {
    std::optional<amp::AutocastGuard> guard;
    if (autocast) guard.emplace(amp::AutocastOptions{.dtype = *autocast});
    out = Probe<Options>::apply(a, b);
  }
  sum(out.to(DType::kF32)).backward();
  EXPECT_EQ(a.grad().dtype(), input_dtype) << "a gradient comes back in its input's dtype";
  EXPECT_EQ(b.grad().dtype(), input_dtype);
  if (a_grad != nullptr) *a_grad = a.grad();
  return Probe<Options>::seen;
}

TEST(FunctionAutocast, ByDefaultTheForwardsOpsCastAndTheBackwardRunsWithAutocastOff) {
  const Seen s = probe<Plain>(DType::kBF16, DType::kF32);
  EXPECT_EQ(s.forward_input, DType::kF32) << "the inputs are not cast without options";
  EXPECT_TRUE(s.forward_autocast);
  EXPECT_EQ(s.matmul_out, DType::kBF16);
  EXPECT_FALSE(s.backward_autocast);
}

TEST(FunctionAutocast, CustomBwdRunsTheBackwardInTheForwardsState) {
  for (DType low : {DType::kF16, DType::kBF16}) {
    const Seen s = probe<CustomBwd>(low, DType::kF32);
    EXPECT_TRUE(s.forward_autocast);
    EXPECT_TRUE(s.backward_autocast);
    EXPECT_EQ(s.backward_dtype, low);
  }
  EXPECT_FALSE(amp::is_enabled(DeviceType::kCPU)) << "the backward's replay leaves nothing behind";
  EXPECT_FALSE(probe<CustomBwd>(std::nullopt, DType::kF32).backward_autocast) << "no autocast at the forward";
}

TEST(FunctionAutocast, CastInputsRunsTheForwardInThatDtypeWithAutocastOff) {
  Tensor grad_with, grad_without;
  Seen s = probe<CastToF32>(DType::kF16, DType::kF16, &grad_with);
  EXPECT_EQ(s.forward_input, DType::kF32) << "an f16 input is cast to f32";
  EXPECT_FALSE(s.forward_autocast);
  EXPECT_EQ(s.matmul_out, DType::kF32) << "the forward's ops run with autocast off";
  EXPECT_FALSE(s.backward_autocast) << "custom_bwd replays the forward's state, which was off (as PyTorch)";
  // Without autocast nothing is cast.
  s = probe<CastToF32>(std::nullopt, DType::kF16, &grad_without);
  EXPECT_EQ(s.forward_input, DType::kF16);
  EXPECT_EQ(s.matmul_out, DType::kF16);
  // The gradient reached the f16 input through the cast, and is the same either way.
  EXPECT_EQ(values(grad_with), values(grad_without));
}

// An op of the user's own: a category for each device, registered so that the policy table knows it.
inline constexpr OpInfo kFusedScale{"test_fused_scale",
                                    {.cpu = amp::CastPolicy::kLowerPrecision, .cuda = amp::CastPolicy::kFp32}};
inline constexpr OpInfo kRefusedOp{"test_refused_op", {.cpu = amp::CastPolicy::kRefused}};

struct FusedScale : Function<FusedScale> {
  static constexpr std::string_view name = "FusedScale";
  static constexpr FunctionOptions options{.op = &kFusedScale};
  static inline DType seen = DType::kF64;
  static Tensor forward(FunctionContext&, const Tensor& x, const Tensor& s) {
    seen = x.dtype();
    EXPECT_FALSE(amp::is_enabled(DeviceType::kCPU));
    return x * s;
  }
  static std::vector<Tensor> backward(FunctionContext&, std::vector<Tensor> grads) { return {grads[0], Tensor()}; }
};

TEST(FunctionAutocast, AnOpOfItsOwnIsCastByItsCategoryForTheDevice) {
  ASSERT_TRUE(amp::register_op(kFusedScale));
  EXPECT_TRUE(amp::register_op(kFusedScale)) << "registering the same descriptor again changes nothing";
  EXPECT_EQ(amp::policy_for("test_fused_scale", DeviceType::kCPU), amp::CastPolicy::kLowerPrecision);
  EXPECT_EQ(amp::policy_for("test_fused_scale", DeviceType::kCUDA), amp::CastPolicy::kFp32);
  bool listed = false;
  for (const amp::PolicyEntry& e : amp::policy_table()) listed = listed || e.op == "test_fused_scale";
  EXPECT_TRUE(listed) << "the policy table lists a registered op";

  Tensor x = random_tensor({3}, 30, DType::kF32), s = random_tensor({3}, 31, DType::kF32);
  x.set_requires_grad(true);
  Tensor y;
  {
    amp::AutocastGuard guard({.dtype = DType::kF16});
    y = FusedScale::apply(x, s);
    EXPECT_EQ(FusedScale::seen, DType::kF16) << "the CPU category: lower precision";
    // The by-name cast of the user's own entry point knows it too.
    EXPECT_EQ(amp::cast_input("test_fused_scale", x).dtype(), DType::kF16);
    amp::AutocastGuard cuda_lists({.policy_device = DeviceType::kCUDA});
    FusedScale::apply(x.to(DType::kBF16), s);
    EXPECT_EQ(FusedScale::seen, DType::kF32) << "the CUDA category: fp32";
  }
  FusedScale::apply(x, s);
  EXPECT_EQ(FusedScale::seen, DType::kF32) << "without autocast nothing is cast";
  sum(y.to(DType::kF32)).backward();
  EXPECT_EQ(x.grad().dtype(), DType::kF32);
}

TEST(FunctionAutocast, RegisteringTakenNamesThrows) {
  static constexpr OpInfo kClash{"matmul", {.cpu = amp::CastPolicy::kFp32}};
  try {
    amp::register_op(kClash);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "amp::register_op: 'matmul' is the name of a built-in op, whose categories are its own. HINT: give "
              "your op a name of its own");
  }
  static constexpr OpInfo kFirst{"test_twice", {}}, kSecond{"test_twice", {.cpu = amp::CastPolicy::kFp32}};
  amp::register_op(kFirst);
  EXPECT_THROW(amp::register_op(kSecond), Error);
  static constexpr OpInfo kUnnamed{"", {}};
  EXPECT_THROW(amp::register_op(kUnnamed), Error);
}

struct Refused : Function<Refused> {
  static constexpr FunctionOptions options{.op = &kRefusedOp};
  static Tensor forward(FunctionContext&, const Tensor& x) { return x * 1.0; }
  static std::vector<Tensor> backward(FunctionContext&, std::vector<Tensor> grads) { return {grads[0]}; }
};

TEST(FunctionAutocast, ARefusedCategoryThrowsUnderAutocastOnly) {
  const Tensor x = random_tensor({2}, 32, DType::kF32);
  EXPECT_NO_THROW(Refused::apply(x));
  amp::AutocastGuard guard({.dtype = DType::kBF16});
  try {
    Refused::apply(x);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("test_refused_op: unsafe to autocast on the CPU", 0), 0u) << e.what();
  }
}

struct BothCasts : Function<BothCasts> {
  static constexpr FunctionOptions options{.cast_inputs = DType::kF32, .op = &kFusedScale};
  static Tensor forward(FunctionContext&, const Tensor& x) { return x * 1.0; }
  static std::vector<Tensor> backward(FunctionContext&, std::vector<Tensor> grads) { return {grads[0]}; }
};

TEST(FunctionAutocast, CastInputsAndOpTogetherThrow) {
  EXPECT_THROW(BothCasts::apply(random_tensor({2}, 33, DType::kF32)), Error);
}

// recompute replays the policy device too: a CPU run of the CUDA categories recomputes with them (softmax
// is fp32 on CUDA, untouched on the CPU), so the recomputed output has the forward's dtype and the
// gradients equal the plain graph's.
TEST(FunctionAutocast, RecomputeReplaysThePolicyDevice) {
  Tensor x = random_tensor({4, 5}, 34, DType::kF16);
  x.set_requires_grad(true);
  const auto segment = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{softmax(in[0] * 2.0, 1)}; };
  Tensor plain, checkpointed;
  {
    amp::AutocastGuard guard({.dtype = DType::kF16, .policy_device = DeviceType::kCUDA});
    plain = segment({x})[0];
    checkpointed = recompute(segment, {x})[0];
  }
  ASSERT_EQ(plain.dtype(), DType::kF32);
  const Tensor w = random_tensor({4, 5}, 35, DType::kF32);
  const Tensor g_plain = grad(sum(plain * w), {x})[0];
  const Tensor g_checkpointed = grad(sum(checkpointed * w), {x})[0];
  EXPECT_EQ(values(g_plain), values(g_checkpointed));
}

}  // namespace
}  // namespace mantissa

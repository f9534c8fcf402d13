// fp8_linear as a custom autograd function over quantize_fp8 and scaled_mm (amp/fp8_linear.h).
#include "amp/fp8_linear.h"

#include <any>
#include <utility>
#include <vector>

#include "framework/autocast_state.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "ops/fp8/fp8.h"
#include "ops/function.h"
#include "ops/reduce/reduce.h"

namespace mantissa::amp {
namespace {

struct Fp8LinearFunction : Function<Fp8LinearFunction> {
  static constexpr std::string_view name = "Fp8Linear";
  // The backward reads FP8 intermediates and calls non-differentiable ops: first order only.
  static constexpr FunctionOptions options{.once_differentiable = true};

  static Tensor forward(FunctionContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const std::shared_ptr<Fp8LinearState>& state, Fp8StateUpdate update, DType out_dtype) {
    const int64_t k = weight.size(1), n = weight.size(0);
    const Tensor x2 = x.reshape({-1, k});  // [M, K]
    const Fp8Cast cx = fp8_cast(state->role(Fp8Role::kInput), x2, update);
    const Fp8Cast cw = fp8_cast(state->role(Fp8Role::kWeight), weight, update);
    // scaled_mm takes a bias in f32 or the output dtype; the f32 master bias goes in as it is, so the epilogue
    // adds it before the one rounding to the output dtype.
    const Tensor b =
        !bias.defined() || bias.dtype() == DType::kF32 || bias.dtype() == out_dtype ? bias : bias.to(DType::kF32);
    const Tensor y = scaled_mm(cx.data, cw.data.t(), cx.scale_inv, cw.scale_inv, out_dtype, b);
    ctx.save_for_backward({cx.data, cw.data, cx.scale_inv, cw.scale_inv});
    ctx.saved_data["state"] = state;
    ctx.saved_data["update"] = update;
    ctx.saved_data["x_shape"] = x.shape();
    ctx.saved_data["x_dtype"] = x.dtype();
    Shape out_shape = x.shape();
    out_shape.back() = n;
    return y.view(out_shape);
  }

  static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
    const std::vector<Tensor> saved = ctx.saved_tensors();
    const Tensor &x_fp8 = saved[0], &w_fp8 = saved[1], &x_scale_inv = saved[2], &w_scale_inv = saved[3];
    const auto& state = std::any_cast<const std::shared_ptr<Fp8LinearState>&>(ctx.saved_data.at("state"));
    const auto update = std::any_cast<Fp8StateUpdate>(ctx.saved_data.at("update"));
    const auto& x_shape = std::any_cast<const Shape&>(ctx.saved_data.at("x_shape"));
    const auto x_dtype = std::any_cast<DType>(ctx.saved_data.at("x_dtype"));
    const Tensor g = grads[0].reshape({-1, w_fp8.size(0)});  // [M, N]
    const Fp8Cast cg = fp8_cast(state->role(Fp8Role::kGradOutput), g, update);
    Tensor dx, dw, db;
    if (ctx.needs_input_grad(0)) dx = scaled_mm(cg.data, w_fp8, cg.scale_inv, w_scale_inv, x_dtype).view(x_shape);
    if (ctx.needs_input_grad(1)) dw = scaled_mm(cg.data.t(), x_fp8, cg.scale_inv, x_scale_inv, DType::kF32);
    if (ctx.needs_input_grad(2)) db = sum(g.to(DType::kF32), {0});
    return {dx, dw, db, Tensor(), Tensor(), Tensor()};
  }
};

DType output_dtype(const Tensor& x) {
  const int device = static_cast<int>(x.device().type);
  return autocast_tls().enabled[device] ? autocast_tls().dtype[device] : x.dtype();
}

}  // namespace

std::shared_ptr<Fp8LinearState> Fp8LinearState::make(std::string name, const Fp8Recipe& recipe, Device device) {
  auto state = std::make_shared<Fp8LinearState>();
  state->name = std::move(name);
  for (Fp8Role r : kFp8Roles)
    state->role(r) = Fp8TensorState::make(recipe.role(r), recipe.dtype(r), recipe.overflow(r), device);
  return state;
}

Fp8Cast fp8_cast(Fp8TensorState& s, const Tensor& x, Fp8StateUpdate update) {
  MT_CHECK(x.device() == s.device(), "fp8_linear: a tensor on ", x.device().str(), " meets FP8 scaling state on ",
           s.device().str(), ". HINT: move the state with the model (Fp8Context::to)");
  const bool dynamic = s.scaling.scaling == Fp8Scaling::kDynamic;
  const bool record = update == Fp8StateUpdate::kRecord;
  // One op: the cast with its scale (computed from x when dynamic) and, when recording, fp8_record's two
  // updates folded in (amp/fp8_scaling.h's composed ops give the same bits; tests/amp/fp8_cast_fold_test.cc).
  Fp8CastResult c = quantize_fp8(x, {.fp8 = s.dtype,
                                     .overflow = s.overflow,
                                     .scale = dynamic ? Tensor() : s.scale,
                                     .margin = s.scaling.margin,
                                     .amax_into = record ? s.amax_history.select(0, s.slot) : Tensor(),
                                     .overflow_into = record ? s.overflow_count : Tensor()});
  if (!dynamic) return {std::move(c.data), s.scale_inv};
  if (record) {
    s.scale = c.scale;
    s.scale_inv = c.scale_inv;
  }
  return {std::move(c.data), std::move(c.scale_inv)};
}

Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const std::shared_ptr<Fp8LinearState>& state) {
  return fp8_linear(x, weight, bias, state, GradMode::is_enabled() ? Fp8StateUpdate::kRecord : Fp8StateUpdate::kLeave);
}

Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const std::shared_ptr<Fp8LinearState>& state, Fp8StateUpdate update) {
  MT_CHECK(state != nullptr, "fp8_linear: no scaling state. HINT: Fp8LinearState::make(name, recipe, device)");
  MT_CHECK(weight.dim() == 2, "fp8_linear: expected a 2-D weight [out_features, in_features], got ",
           shape_str(weight.shape()));
  MT_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "fp8_linear: input ", shape_str(x.shape()),
           " does not end in the weight's ", weight.size(1), " in_features (weight ", shape_str(weight.shape()), ")");
  MT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "fp8_linear: expected a bias [",
           weight.size(0), "], got ", shape_str(bias.shape()));
  for (const Tensor* t : {&x, &weight})
    MT_CHECK(t->dtype() == DType::kF32 || t->dtype() == DType::kF16 || t->dtype() == DType::kBF16,
             "fp8_linear: casts f32, f16 or bf16 to FP8, got a ", dtype_name(t->dtype()), " ",
             t == &x ? "input" : "weight");
  return Fp8LinearFunction::apply(x, weight, bias, state, update, output_dtype(x));
}

}  // namespace mantissa::amp

// fp8_linear as a custom autograd function over quantize_fp8 and scaled_mm (amp/fp8_linear.h).
#include "amp/fp8_linear.h"

#include <any>
#include <utility>
#include <vector>

#include "framework/autocast_state.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "ops/elementwise/elementwise.h"
#include "ops/fp8/blocks.h"
#include "ops/fp8/fp8.h"
#include "ops/function.h"
#include "ops/reduce/reduce.h"

namespace mantissa::amp {
namespace {

// What both FP8 linear functions keep for their backward besides tensors, and read back there.
struct SavedLinear {
  std::shared_ptr<Fp8LinearState> state;
  Fp8StateUpdate update;
  Shape x_shape;
  DType x_dtype;

  void save(FunctionContext& ctx) const {
    ctx.saved_data["state"] = state;
    ctx.saved_data["update"] = update;
    ctx.saved_data["x_shape"] = x_shape;
    ctx.saved_data["x_dtype"] = x_dtype;
  }
  static SavedLinear load(const FunctionContext& ctx) {
    return {std::any_cast<const std::shared_ptr<Fp8LinearState>&>(ctx.saved_data.at("state")),
            std::any_cast<Fp8StateUpdate>(ctx.saved_data.at("update")),
            std::any_cast<const Shape&>(ctx.saved_data.at("x_shape")),
            std::any_cast<DType>(ctx.saved_data.at("x_dtype"))};
  }
  // y [M, N] in x's leading shape.
  Tensor output(const Tensor& y) const {
    Shape out_shape = x_shape;
    out_shape.back() = y.size(1);
    return y.view(out_shape);
  }
};

struct Fp8LinearFunction : Function<Fp8LinearFunction> {
  static constexpr std::string_view name = "Fp8Linear";
  // The backward reads FP8 intermediates and calls non-differentiable ops: first order only.
  static constexpr FunctionOptions options{.once_differentiable = true};

  static Tensor forward(FunctionContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const std::shared_ptr<Fp8LinearState>& state, Fp8StateUpdate update, DType out_dtype) {
    const int64_t k = weight.size(1);
    const Tensor x2 = x.reshape({-1, k});  // [M, K]
    const Fp8Cast cx = fp8_cast(state->role(Fp8Role::kInput), x2, update);
    const Fp8Cast cw = fp8_cast(state->role(Fp8Role::kWeight), weight, update);
    // scaled_mm takes a bias in f32 or the output dtype; the f32 master bias goes in as it is, so the epilogue
    // adds it before the one rounding to the output dtype.
    const Tensor b =
        !bias.defined() || bias.dtype() == DType::kF32 || bias.dtype() == out_dtype ? bias : bias.to(DType::kF32);
    const Tensor y = scaled_mm(cx.data, cw.data.t(), cx.scale_inv, cw.scale_inv, out_dtype, b);
    ctx.save_for_backward({cx.data, cw.data, cx.scale_inv, cw.scale_inv});
    const SavedLinear saved{state, update, x.shape(), x.dtype()};
    saved.save(ctx);
    return saved.output(y);
  }

  static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
    const std::vector<Tensor> saved = ctx.saved_tensors();
    const Tensor &x_fp8 = saved[0], &w_fp8 = saved[1], &x_scale_inv = saved[2], &w_scale_inv = saved[3];
    const auto [state, update, x_shape, x_dtype] = SavedLinear::load(ctx);
    const Tensor g = grads[0].reshape({-1, w_fp8.size(0)});  // [M, N]
    const Fp8Cast cg = fp8_cast(state->role(Fp8Role::kGradOutput), g, update);
    Tensor dx, dw, db;
    if (ctx.needs_input_grad(0)) dx = scaled_mm(cg.data, w_fp8, cg.scale_inv, w_scale_inv, x_dtype).view(x_shape);
    if (ctx.needs_input_grad(1)) dw = scaled_mm(cg.data.t(), x_fp8, cg.scale_inv, x_scale_inv, DType::kF32);
    if (ctx.needs_input_grad(2)) db = sum(g.to(DType::kF32), {0});
    return {dx, dw, db, Tensor(), Tensor(), Tensor()};
  }
};

// ---- block-scaled recipes ----

// One operand of a block-scaled GEMM, quantized along its columns (the GEMM's K): scale [R, blocks] (rowwise:
// [R, 1]), or [ceil(R / b), ceil(C / b)] for square blocks, which may be transposed as a whole.
struct BlockOperand {
  Tensor data;
  Tensor scale;
  Tensor tensor_scale;  // NVFP4's per-tensor decode scale; undefined otherwise
  bool square = false;
  BlockOperand t() const { return {data.t(), scale.t(), tensor_scale, square}; }
};

// NVIDIA's fixed random signs for the 16x16 Hadamard transform (Transformer Engine's NVFP4 recipe,
// transformer_engine/pytorch/tensor/nvfp4_tensor.py: one sign vector shared by every layer for the whole run).
const Tensor& hadamard_signs() {
  static const Tensor signs = from_vector(std::vector<float>{1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1});
  return signs;
}

// The quantization of role r's operand for the recipe: 1-D tiles along the columns, or square ones.
BlockQuantOptions cast_options(const Fp8Recipe& r, Fp8Role role, bool square, bool stochastic) {
  BlockQuantOptions o{.element = r.fp4()
                                     ? BlockElement::kE2M1
                                     : (r.dtype(role) == DType::kF8E5M2 ? BlockElement::kE5M2 : BlockElement::kE4M3),
                      .margin = r.role(role).margin,
                      .overflow = r.overflow(role),
                      .stochastic = stochastic};
  const int64_t b = r.block_k();
  o.block_cols = b;  // 0 for rowwise: whole rows
  o.block_rows = square ? b : 1;
  switch (r.granularity) {
    case Fp8Granularity::kRowwise:
    case Fp8Granularity::kBlockwise: o.rule = r.pow2_scales ? BlockScaleRule::kF32Pow2 : BlockScaleRule::kF32; break;
    case Fp8Granularity::kMxfp8:
    case Fp8Granularity::kMxfp4: o.rule = r.rceil_scales ? BlockScaleRule::kE8M0Rceil : BlockScaleRule::kE8M0; break;
    case Fp8Granularity::kNvfp4: o.rule = BlockScaleRule::kNvfp4; break;
    case Fp8Granularity::kTensor: MT_ASSERT(false, "a per-tensor recipe in the block-scaled path");
  }
  return o;
}

// Whether the recipe's weights take square blocks (one quantization serves the forward and the dgrad).
bool square_weights(const Fp8Recipe& r) {
  return r.granularity == Fp8Granularity::kBlockwise || (r.granularity == Fp8Granularity::kNvfp4 && r.weight_2d);
}

// Casts x2d for role r and records the cast into the role's state when `update` says so. Along its columns
// (x2d [R, C] quantized along C: the operand [R, C]), or, with `along_rows`, along its rows in b x 1 tiles, read
// in place (x2d [C, R] quantized along C: the operand is its transpose, [R, C], with no transposed copy made).
BlockOperand block_cast(Fp8LinearState& state, Fp8Role role, const Tensor& x2d, bool square, bool gradient,
                        Fp8StateUpdate update, bool along_rows = false) {
  const Fp8Recipe& r = state.recipe;
  const bool stochastic = gradient && r.fp4() && r.stochastic_rounding;
  BlockQuantOptions o = cast_options(r, role, square, stochastic);
  if (along_rows) {
    o.block_rows = o.block_cols == 0 ? std::max<int64_t>(x2d.size(0), 1) : o.block_cols;
    o.block_cols = 1;
  }
  if (stochastic) {
    o.seed = state.rounding_seed;
    o.offset = static_cast<uint64_t>(state.rounding_calls++);
  }
  BlockQuantized q = quantize_blocks(x2d, o);
  if (update == Fp8StateUpdate::kRecord) {
    Fp8TensorState& s = state.role(role);
    fp8_record(s, q.amax, q.overflow);
    s.underflow_count = add(s.underflow_count, q.underflow.to(DType::kF64));
  }
  if (along_rows) return {q.data.t(), q.scale_inv.t(), std::move(q.tensor_scale_inv), false};
  return {std::move(q.data), std::move(q.scale_inv), std::move(q.tensor_scale_inv), square};
}

// a [M, K] and b [N, K], both quantized along K: out [M, N] = a b^T, scaled per row or per block.
Tensor block_gemm(const Fp8Recipe& r, const BlockOperand& a, const BlockOperand& b, DType out_dtype,
                  const Tensor& bias) {
  if (r.granularity == Fp8Granularity::kRowwise)  // torchao's rowwise scaled_mm: one fused epilogue
    return scaled_mm(a.data, b.data.t(), a.scale.reshape({-1}), b.scale.reshape({-1}), out_dtype, bias);
  const Tensor alpha = a.tensor_scale.defined() ? mul(a.tensor_scale, b.tensor_scale) : Tensor();
  return block_scaled_mm(
      a.data, b.data.t(), a.scale, b.scale.t(),
      {.block_k = r.block_k(), .out_dtype = out_dtype, .bias = bias, .alpha = alpha, .e2m1 = r.fp4()});
}

struct Fp8BlockLinearFunction : Function<Fp8BlockLinearFunction> {
  static constexpr std::string_view name = "Fp8BlockLinear";
  static constexpr FunctionOptions options{.once_differentiable = true};

  static Tensor forward(FunctionContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const std::shared_ptr<Fp8LinearState>& state, Fp8StateUpdate update, DType out_dtype) {
    const Fp8Recipe& r = state->recipe;
    const int64_t k = weight.size(1);
    const Tensor x2 = x.reshape({-1, k});  // [M, K]
    const bool square = square_weights(r);
    const BlockOperand qx = block_cast(*state, Fp8Role::kInput, x2, false, false, update);
    const BlockOperand qw = block_cast(*state, Fp8Role::kWeight, weight, square, false, update);
    const Tensor b =
        !bias.defined() || bias.dtype() == DType::kF32 || bias.dtype() == out_dtype ? bias : bias.to(DType::kF32);
    const Tensor y = block_gemm(r, qx, qw, out_dtype, b);
    // The backward re-quantizes x along M, and w along N unless its square blocks serve transposed.
    if (square) {
      ctx.save_for_backward({x2, qw.data, qw.scale, qw.tensor_scale});
    } else {
      ctx.save_for_backward({x2, weight});
    }
    const SavedLinear saved{state, update, x.shape(), x.dtype()};
    saved.save(ctx);
    return saved.output(y);
  }

  static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
    const std::vector<Tensor> saved = ctx.saved_tensors();
    const auto [state, update, x_shape, x_dtype] = SavedLinear::load(ctx);
    const Fp8Recipe& r = state->recipe;
    const bool square = square_weights(r);
    const Tensor& x2 = saved[0];
    const int64_t n = saved[1].size(0);          // w [N, K], or its square-block FP8 data
    const Tensor g = grads[0].reshape({-1, n});  // [M, N]
    Tensor dx, dw, db;
    if (ctx.needs_input_grad(0)) {
      const BlockOperand qg = block_cast(*state, Fp8Role::kGradOutput, g, false, true, update);
      // w along N: [K, N] quantized along N.
      const BlockOperand qw =
          square ? BlockOperand{saved[1], saved[2], saved[3], true}.t()
                 : block_cast(*state, Fp8Role::kWeight, saved[1].t().contiguous(), false, false, update);
      dx = block_gemm(r, qg, qw, x_dtype, Tensor()).view(x_shape);
    }
    if (ctx.needs_input_grad(1)) {
      // The operands g^T [N, M] and x^T [K, M], quantized along the batch M. Read in place from g and x; with the
      // Hadamard transform, which runs along rows, from rotated transposed copies.
      BlockOperand qgt, qxt;
      if (r.fp4() && r.hadamard) {
        const Tensor signs = hadamard_signs().to(g.device());
        qgt = block_cast(*state, Fp8Role::kGradOutput, hadamard16(g.t().contiguous(), signs), false, true, update);
        qxt = block_cast(*state, Fp8Role::kInput, hadamard16(x2.t().contiguous(), signs), false, false, update);
      } else {
        qgt = block_cast(*state, Fp8Role::kGradOutput, g, false, true, update, true);
        qxt = block_cast(*state, Fp8Role::kInput, x2, false, false, update, true);
      }
      dw = block_gemm(r, qgt, qxt, DType::kF32, Tensor());
    }
    if (ctx.needs_input_grad(2)) db = sum(g.to(DType::kF32), {0});
    return {dx, dw, db, Tensor(), Tensor(), Tensor()};
  }
};

DType output_dtype(const Tensor& x) {
  const int device = static_cast<int>(x.device().type);
  return autocast_tls().enabled[device] ? autocast_tls().dtype[device] : x.dtype();
}

}  // namespace

std::shared_ptr<Fp8LinearState> Fp8LinearState::make(std::string name, const Fp8Recipe& recipe, Device device,
                                                     uint64_t rounding_seed) {
  auto state = std::make_shared<Fp8LinearState>();
  state->name = std::move(name);
  state->recipe = recipe;
  state->rounding_seed = rounding_seed;
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
                                     .overflow_into = record ? s.overflow_count : Tensor(),
                                     .underflow_into = record ? s.underflow_count : Tensor()});
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
  if (state->recipe.block_scaled())
    return Fp8BlockLinearFunction::apply(x, weight, bias, state, update, output_dtype(x));
  return Fp8LinearFunction::apply(x, weight, bias, state, update, output_dtype(x));
}

}  // namespace mantissa::amp

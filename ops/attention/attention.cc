// scaled_dot_product_attention: the fused op (ops/attention/attention_cpu.cc, attention.cu) with its
// backward node, and the composed math path it is checked against and falls back to for empty shapes.
//
// Under autocast the inputs go to the lower-precision dtype once, at the entry; inside, scores, softmax
// and the accumulation are f32 whatever the dtype (PyTorch's fused CPU kernel does the same), and the
// output rounds once. The composed path runs with autocast suspended, so its softmax and weights round
// to the inputs' dtype: the difference between the two in bf16 is what the fusion buys in accuracy.
#include "ops/attention/attention.h"

#include <cmath>

#include "framework/autocast_state.h"
#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "framework/profiler/profiler.h"
#include "ops/attention/attention_cpu.h"
#include "ops/attention/attention_cuda.h"
#include "ops/autocast.h"
#include "ops/cpu/loops.h"
#include "ops/cuda/philox.h"
#include "ops/dropout/dropout.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "ops/softmax/softmax.h"

namespace mantissa {
namespace {

constexpr std::string_view kOp = "scaled_dot_product_attention";

template <typename T>
cpu::AttentionForwardArgs<T> cpu_args(const AttentionProblem& p) {
  return {.shape = p.shape,
          .scale = static_cast<compute_t<T>>(p.scale),
          .dropout = p.dropout,
          .q = p.q.data<T>(),
          .q_rows = p.q_rows,
          .k = p.k.data<T>(),
          .k_rows = p.k_rows,
          .v = p.v.data<T>(),
          .v_rows = p.v_rows,
          .out = p.out.data<T>(),
          .lse = p.lse.data<compute_t<T>>()};
}

void cpu_attention_forward(const AttentionProblem& p) {
  dispatch_floating(p.q.dtype(), kOp, [&]<typename T>() { cpu::attention_forward<T>(cpu_args<T>(p)); });
}

void cpu_attention_backward(const AttentionProblem& p, const AttentionGrads& g) {
  dispatch_floating(p.q.dtype(), "ScaledDotProductAttentionBackward", [&]<typename T>() {
    cpu::attention_backward<T>({.forward = cpu_args<T>(p),
                                .dout = g.dout.data<T>(),
                                .dq = g.dq.data<T>(),
                                .dk = g.dk.data<T>(),
                                .dv = g.dv.data<T>()});
  });
}

constexpr DeviceKernels<decltype(cpu_attention_forward)> kForward{.cpu = &cpu_attention_forward,
                                                                  .cuda = MT_CUDA_KERNEL(cuda_attention_forward)};
constexpr DeviceKernels<decltype(cpu_attention_backward)> kBackward{.cpu = &cpu_attention_backward,
                                                                    .cuda = MT_CUDA_KERNEL(cuda_attention_backward)};

// The rows of t ([batch..., rows, cols]) as the kernels address them, or nullopt when its batch dims
// do not fold into two levels or its last dim is strided (the caller then makes it contiguous).
std::optional<AttentionRows> rows_of(const Tensor& t) {
  const int64_t nb = t.dim() - 2;
  if (t.size(-1) > 1 && t.stride(-1) != 1) return std::nullopt;
  AttentionRows r{.inner_size = 1, .outer_stride = 0, .inner_stride = 0, .row_stride = t.stride(-2)};
  if (nb == 0) return r;
  r.inner_size = t.size(nb - 1);
  r.inner_stride = t.stride(nb - 1);
  // The outer dims [0, nb - 1) must be one stride apart (size-1 dims do not count).
  int64_t expect = -1;
  for (int64_t d = nb - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (expect >= 0 && t.stride(d) != expect) return std::nullopt;
    if (expect < 0) r.outer_stride = t.stride(d);
    expect = t.stride(d) * t.size(d);
  }
  return r;
}

// t with rows the kernels can address: itself (a view) when it already has them.
Tensor addressable(const Tensor& t, AttentionRows& rows) {
  if (const auto r = rows_of(t)) {
    rows = *r;
    return t;
  }
  const Tensor c = t.contiguous();
  rows = *rows_of(c);
  return c;
}

Shape batch_shape(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

Shape with_batch(const Shape& batch, int64_t rows, int64_t cols) {
  Shape s = batch;
  s.push_back(rows);
  s.push_back(cols);
  return s;
}

// The multiply-adds of one call (x2 FLOPs) over the visible (query, key) pairs V: forward q k^T and P v,
// (2 D + 2 Dv) V; backward the scores again, dV, dP, dQ and dK, (6 D + 4 Dv) V.
double attention_flops(const AttentionShape& s, bool backward) {
  double pairs = 0;
  for (int64_t i = 0; i < s.L; ++i) pairs += static_cast<double>(s.visible_keys(i));
  pairs *= static_cast<double>(s.N);
  const double d = static_cast<double>(s.D), dv = static_cast<double>(s.Dv);
  return (backward ? 6 * d + 4 * dv : 2 * d + 2 * dv) * pairs;
}

// softmax(scale q k^T + mask), as the composed ops compute it (create_graph and the math path use it).
Tensor attention_weights(const Tensor& q, const Tensor& k, double scale, bool causal) {
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), scale);  // [..., L, S]
  if (causal) {
    const int64_t L = q.size(-2), S = k.size(-2);
    // j > i is masked; rows/cols are broadcast over the batch dims (and live on the scores' device).
    const Tensor rows = arange(static_cast<double>(L)).reshape({L, 1}).to(scores.device());
    const Tensor cols = arange(static_cast<double>(S)).reshape({1, S}).to(scores.device());
    scores = masked_fill(scores, gt(cols, rows), -INFINITY);
  }
  return softmax(scores, -1);
}

struct ScaledDotProductAttentionBackward final : Node {
  SavedTensor q{this, "query"}, k{this, "key"}, v{this, "value"};
  SavedTensor out{this, "result"}, lse{this, "logsumexp"};
  AttentionRows q_rows, k_rows, v_rows;
  AttentionShape shape;
  double scale = 1.0;
  double dropout_p = 0.0;
  AttentionDropout dropout;
  GeneratorState generator_state;  // the state the forward drew its dropout words from

  std::string_view name() const override { return "ScaledDotProductAttentionBackward"; }
  bool supports_create_graph() const override { return true; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (compute_requires_grad({&grads[0], &q.get(), &k.get(), &v.get()})) return graph_backward(grads[0]);
    const Tensor &qt = q.get(), &kt = k.get(), &vt = v.get();
    AttentionProblem p{.q = qt,
                       .k = kt,
                       .v = vt,
                       .q_rows = q_rows,
                       .k_rows = k_rows,
                       .v_rows = v_rows,
                       .shape = shape,
                       .scale = scale,
                       .dropout = dropout,
                       .out = out.get(),
                       .lse = lse.get()};
    const TensorOptions like{.dtype = qt.dtype(), .device = qt.device()};
    AttentionGrads g{.dout = grads[0].to(qt.dtype()).contiguous(),
                     .dq = empty(qt.shape(), like),
                     .dk = empty(kt.shape(), like),
                     .dv = empty(vt.shape(), like)};
    profiler::RecordScope scope(name(), profiler::Category::kOp, qt.device());  // the dispatch folds into it
    if (scope.active()) scope.add_flops(attention_flops(shape, true));
    dispatch(name(), kBackward, qt.device(), p, g);
    return {g.dq, g.dk, g.dv};
  }

  // The same gradients with differentiable ops (create_graph), the weights recomputed by the composed
  // path and the dropout mask redrawn from the forward's generator state (the very words it used):
  //   dV = Pd^T dO, dP = (dO V^T) * mask, dS = P * (dP - rowsum(dP * P)), dQ = scale dS K, dK = scale dS^T Q.
  std::vector<Tensor> graph_backward(const Tensor& dy) const {
    const Tensor &qt = q.get(), &kt = k.get(), &vt = v.get();
    const Tensor p = attention_weights(qt, kt, scale, shape.causal);
    Tensor mask;
    if (dropout.active()) {
      Generator g;
      g.set_state(generator_state);
      mask = mantissa::dropout(ones(p.shape(), {.dtype = p.dtype(), .device = p.device()}), dropout_p, &g);
    }
    const Tensor pd = mask.defined() ? p * mask : p;
    const Tensor dv = matmul(pd.transpose(-2, -1), dy);
    Tensor dp = matmul(dy, vt.transpose(-2, -1));
    if (mask.defined()) dp = dp * mask;
    const Tensor ds = p * (dp - sum(dp * p, {-1}, KeepDim::kYes));
    return {mul(matmul(ds, kt), scale), mul(matmul(ds.transpose(-2, -1), qt), scale), dv};
  }
};

}  // namespace

Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions options) {
  const double scale = options.scale != 0.0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor w = attention_weights(q, k, scale, options.mask == AttentionMask::kCausal);
  if (options.dropout_p > 0.0) w = dropout(w, options.dropout_p, options.generator);
  return matmul(w, v);
}

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    AttentionOptions options) {
  MT_CHECK(q_in.defined() && k_in.defined() && v_in.defined(), kOp, ": q, k and v must be defined tensors");
  const std::vector<Tensor> in = amp::cast_inputs(ops::scaled_dot_product_attention, {q_in, k_in, v_in});
  AutocastSuspend body;
  const Tensor &q0 = in[0], &k0 = in[1], &v0 = in[2];
  MT_CHECK(q0.dim() >= 2 && k0.dim() >= 2 && v0.dim() >= 2, kOp, ": q, k and v need at least 2 dims [..., T, D], got ",
           shape_str(q0.shape()), ", ", shape_str(k0.shape()), " and ", shape_str(v0.shape()));
  MT_CHECK(q0.size(-1) == k0.size(-1), kOp, ": q ", shape_str(q0.shape()), " and k ", shape_str(k0.shape()),
           " differ in the last (head) dim");
  MT_CHECK(k0.size(-2) == v0.size(-2), kOp, ": k ", shape_str(k0.shape()), " and v ", shape_str(v0.shape()),
           " differ in the sequence dim (-2)");
  MT_CHECK(q0.dtype() == k0.dtype() && q0.dtype() == v0.dtype(), kOp, ": q, k and v must have one dtype, got ",
           dtype_name(q0.dtype()), ", ", dtype_name(k0.dtype()), " and ", dtype_name(v0.dtype()));
  MT_CHECK(is_floating(q0.dtype()), kOp, ": expected floating tensors (f32, f64, f16, bf16), got ",
           dtype_name(q0.dtype()));
  MT_CHECK(q0.device() == k0.device() && q0.device() == v0.device(), kOp, ": q, k and v must be on one device, got ",
           q0.device().str(), ", ", k0.device().str(), " and ", v0.device().str());
  MT_CHECK(options.dropout_p >= 0.0 && options.dropout_p <= 1.0, kOp, ": dropout_p must be in [0, 1], got ",
           options.dropout_p);
  MT_CHECK(options.scale >= 0.0 && std::isfinite(options.scale), kOp,
           ": scale must be finite and >= 0 (0 means 1/sqrt(D)), got ", options.scale);
  kernel_for(kOp, kForward, q0.device());

  const Shape batch =
      cpu::broadcast_shapes(cpu::broadcast_shapes(batch_shape(q0), batch_shape(k0), kOp), batch_shape(v0), kOp);
  const int64_t L = q0.size(-2), S = k0.size(-2), D = q0.size(-1), Dv = v0.size(-1);
  int64_t N = 1;
  for (int64_t b : batch) N *= b;
  // Nothing to fuse: no keys (the weights are empty and the output 0), nothing out, or every weight dropped.
  if (S == 0 || N * L * Dv == 0 || options.dropout_p == 1.0) {
    return scaled_dot_product_attention_math(q0, k0, v0, options);
  }

  AttentionProblem p;
  p.q = addressable(q0.expand(with_batch(batch, L, D)), p.q_rows);
  p.k = addressable(k0.expand(with_batch(batch, S, D)), p.k_rows);
  p.v = addressable(v0.expand(with_batch(batch, S, Dv)), p.v_rows);
  p.shape = {.N = N, .L = L, .S = S, .D = D, .Dv = Dv, .causal = options.mask == AttentionMask::kCausal};
  p.scale = options.scale != 0.0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(D));
  GeneratorState drawn_from;
  if (options.dropout_p > 0.0) {
    // The words dropout(weights) would take: one per weight, in [N, L, S] order, from the generator's
    // current position; the generator moves past them as dropout() would move it.
    Generator& gen = options.generator != nullptr ? *options.generator : default_generator();
    drawn_from = gen.state();
    gen.set_state(gpu::advance(drawn_from, static_cast<uint64_t>(N * L * S)));
    p.dropout = {.keep = static_cast<float>(1.0 - options.dropout_p),
                 .scale = 1.0 / (1.0 - options.dropout_p),
                 .seed = drawn_from.seed,
                 .position = gpu::stream_position(drawn_from)};
  }
  const DType acc = q0.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  p.out = empty(with_batch(batch, L, Dv), {.dtype = q0.dtype(), .device = q0.device()});
  p.lse = empty({N, L}, {.dtype = acc, .device = q0.device()});
  {
    profiler::RecordScope scope(kOp, profiler::Category::kOp, q0.device());  // the dispatch folds into it
    if (scope.active()) scope.add_flops(attention_flops(p.shape, false));
    dispatch(kOp, kForward, q0.device(), p);
  }

  if (compute_requires_grad({&p.q, &p.k, &p.v})) {
    auto node = make_node<ScaledDotProductAttentionBackward>({&p.q, &p.k, &p.v});
    node->q = p.q;
    node->k = p.k;
    node->v = p.v;
    node->lse = p.lse;
    node->q_rows = p.q_rows;
    node->k_rows = p.k_rows;
    node->v_rows = p.v_rows;
    node->shape = p.shape;
    node->scale = p.scale;
    node->dropout_p = options.dropout_p;
    node->dropout = p.dropout;
    node->generator_state = drawn_from;
    set_history(p.out, node);
    node->out = p.out;
  }
  return p.out;
}

}  // namespace mantissa

// Matrix products and their backward. Every public op reshapes its operands into one primitive,
// out[B, m, n] = alpha * a[Ba, m, k] @ b[Bb, k, n] + beta * bias (Ba, Bb each B or 1, 1 broadcasting),
// whose node (GemmBackward) holds the only hand-written gradient; views around it carry their own.
// Simply transposed operands reach the GEMM as transpose flags, never as copies. Each public op casts
// its inputs by the autocast policy first (all six are lower-precision ops). CUDA tensors run the same
// primitive through cuBLASLt (ops/matmul/matmul_cuda.h) on the device's current stream.
#include "ops/matmul/matmul.h"

#include <algorithm>
#include <optional>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "framework/profiler/profiler.h"
#include "ops/autocast.h"
#include "ops/cpu/loops.h"
#include "ops/elementwise/elementwise.h"
#include "ops/fp8/fp8.h"
#include "ops/matmul/gemm_cpu.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/matmul/matmul_internal.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

// How the GEMM reads a [batch, rows, cols] operand: row-major with row stride ld, or transposed
// (column-major, column stride ld); batch_stride 0 broadcasts one matrix over the batch.
struct MatLayout {
  cpu::Trans trans;
  int64_t ld;
  int64_t batch_stride;
};

// The layout of x [B, r, c], or nullopt when neither matrix dim is unit-stride (x must be copied).
std::optional<MatLayout> layout_of(const Tensor& x) {
  const int64_t r = x.size(1), c = x.size(2), sr = x.stride(1), sc = x.stride(2);
  const int64_t batch_stride = x.size(0) == 1 ? 0 : x.stride(0);
  if ((c == 1 || sc == 1) && (r == 1 || sr >= std::max<int64_t>(c, 1))) {
    return MatLayout{cpu::Trans::kNo, r == 1 ? std::max<int64_t>(c, 1) : sr, batch_stride};
  }
  if ((r == 1 || sr == 1) && (c == 1 || sc >= std::max<int64_t>(r, 1))) {
    return MatLayout{cpu::Trans::kYes, c == 1 ? std::max<int64_t>(r, 1) : sc, batch_stride};
  }
  return std::nullopt;
}

bool is_transposed_layout(const Tensor& x) {
  const std::optional<MatLayout> l = layout_of(x);
  return l.has_value() && l->trans == cpu::Trans::kYes;
}

// The CPU GEMM has no bias epilogue: a row bias pre-fills every row of C, which the product is then
// accumulated onto (beta 1), as for any other bias; one rounding either way.
template <typename T>
void cpu_gemm(const cpu::BatchedGemmArgs<T>& args, const T* row_bias, Device /*cpu*/) {
  if (row_bias == nullptr) return cpu::gemm_batched(args);
  cpu::BatchedGemmArgs<T> with_bias = args;
  const cpu::GemmArgs<T>& g = args.gemm;
  for (int64_t b = 0; b < args.batch; ++b) {
    for (int64_t i = 0; i < g.m; ++i) std::copy(row_bias, row_bias + g.n, g.c + b * args.stride_c + i * g.ldc);
  }
  with_bias.gemm.beta = 1.0;
  cpu::gemm_batched(with_bias);
}

template <typename T>
constexpr DeviceKernels<void(const cpu::BatchedGemmArgs<T>&, const T*, Device)> kGemm{
    .cpu = &cpu_gemm<T>, .cuda = MT_CUDA_KERNEL(cuda_gemm<T>)};

}  // namespace

// The primitive's kernel call, without autograd. a [Ba, m, k], b [Bb, k, n]; bias (optional) broadcasts
// to [B, m, n] and is read only when beta != 0. Returns a new contiguous [B, m, n].
Tensor run_gemm(const Tensor& bias, const Tensor& a_in, const Tensor& b_in, double beta, double alpha) {
  Tensor a = a_in.detach(), b = b_in.detach();
  const int64_t batch = a.size(0) == 0 || b.size(0) == 0 ? 0 : std::max(a.size(0), b.size(0)), m = a.size(1),
                k = a.size(2), n = b.size(2);
  // Every GEMM, forward and backward, is one profiler event "matmul" with its operands and 2 m n k FLOPs
  // per batch; the kernel's dispatch below is folded into it.
  profiler::RecordScope scope("matmul", profiler::Category::kOp, a.device());
  if (scope.active()) {
    scope.add_input(a);
    scope.add_input(b);
    if (bias.defined()) scope.add_input(bias);
    scope.add_bytes(static_cast<double>(batch * m * n) * static_cast<double>(element_size(a.dtype())));
    scope.add_flops(2.0 * static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
                    static_cast<double>(k));
  }
  MT_ASSERT(b.size(1) == k && (a.size(0) == batch || a.size(0) == 1) && (b.size(0) == batch || b.size(0) == 1),
            "run_gemm: ", shape_str(a.shape()), " @ ", shape_str(b.shape()));
  std::optional<MatLayout> la = layout_of(a), lb = layout_of(b);
  if (!la) {
    a = a.contiguous();
    la = layout_of(a);
  }
  if (!lb) {
    b = b.contiguous();
    lb = layout_of(b);
  }
  Tensor out = empty({batch, m, n}, {.dtype = a.dtype(), .device = a.device()});
  const bool read_bias = bias.defined() && beta != 0.0;
  // A row-vector bias ([n], linear's) with beta 1 goes to the kernel (cuBLASLt's epilogue on a GPU); any
  // other bias is broadcast into out first and accumulated onto (beta). Either way one rounding.
  Tensor row_bias;
  const bool is_row = bias.defined() && bias.dim() >= 1 && bias.numel() == n && bias.size(-1) == n;
  if (read_bias && beta == 1.0 && is_row) {
    row_bias = bias.detach().reshape({n}).contiguous();
  } else if (read_bias) {
    copy_(out, bias.detach().expand({batch, m, n}));
  }
  dispatch_floating(a.dtype(), "matmul", [&]<typename T>() {
    const cpu::BatchedGemmArgs<T> args{.gemm = {.trans_a = la->trans,
                                                .trans_b = lb->trans,
                                                .m = m,
                                                .n = n,
                                                .k = k,
                                                .a = a.data<T>(),
                                                .lda = la->ld,
                                                .b = b.data<T>(),
                                                .ldb = lb->ld,
                                                .c = out.data<T>(),
                                                .ldc = n,
                                                .alpha = alpha,
                                                .beta = read_bias && !row_bias.defined() ? beta : 0.0},
                                       .batch = batch,
                                       .stride_a = la->batch_stride,
                                       .stride_b = lb->batch_stride,
                                       .stride_c = m * n};
    dispatch("matmul", kGemm<T>, out.device(), args, row_bias.defined() ? row_bias.data<T>() : nullptr, out.device());
  });
  return out;
}

namespace {

Tensor gemm_op(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha);

// Under create_graph the gradients are GEMMs with history (gemm_op, whose node is this one again), so a
// product can be differentiated any number of times; otherwise plain kernel calls.
struct GemmBackward final : Node {
  SavedTensor a{this, "self"};  // saved only when b needs a gradient
  SavedTensor b{this, "mat2"};  // saved only when a needs a gradient
  Shape bias_shape;
  int64_t batch = 1, batch_a = 1, batch_b = 1, m = 0, k = 0, n = 0;
  bool a_transposed = false, b_transposed = false;  // grads then match the input's memory layout
  double alpha = 1.0, beta = 1.0;
  std::string_view name() const override { return "GemmBackward"; }
  bool supports_create_graph() const override { return true; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];  // [B, m, n]
    Tensor g_bias, g_a, g_b;
    if (next_edges[0].valid()) {
      g_bias = sum_to(g, bias_shape);
      if (beta != 1.0) g_bias = mul(g_bias, beta);
    }
    if (next_edges[1].valid()) {
      const Tensor& bv = b.get();
      g_a = grad_a(g, bv, compute_requires_grad({&g, &bv}) ? &gemm_op : &run_gemm);
    }
    if (next_edges[2].valid()) {
      const Tensor& av = a.get();
      g_b = grad_b(g, av, compute_requires_grad({&g, &av}) ? &gemm_op : &run_gemm);
    }
    return {g_bias, g_a, g_b};
  }

  using Gemm = Tensor (*)(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha);

  // alpha * g @ b^T, summed over the batch when a was broadcast (Ba == 1 < B, so Bb == B): then it is
  // one GEMM over the stacked batch, [m, B*n] @ [B*n, k], with a single rounding.
  Tensor grad_a(const Tensor& g, const Tensor& bv, Gemm gemm) const {
    if (batch_a == batch) {
      if (a_transposed) return gemm({}, bv, g.transpose(1, 2), 0.0, alpha).transpose(1, 2);
      return gemm({}, g, bv.transpose(1, 2), 0.0, alpha);
    }
    return gemm({}, g.permute({1, 0, 2}).reshape({1, m, batch * n}), bv.transpose(1, 2).reshape({1, batch * n, k}), 0.0,
                alpha);
  }

  // alpha * a^T @ g, or for a broadcast b: [k, B*m] @ [B*m, n].
  Tensor grad_b(const Tensor& g, const Tensor& av, Gemm gemm) const {
    if (batch_b == batch) {
      if (b_transposed) return gemm({}, g.transpose(1, 2), av, 0.0, alpha).transpose(1, 2);
      return gemm({}, av.transpose(1, 2), g, 0.0, alpha);
    }
    return gemm({}, av.reshape({1, batch * m, k}).transpose(1, 2), g.reshape({1, batch * m, n}), 0.0, alpha);
  }
};

// The differentiable primitive (see the top of the file). Arguments are already checked.
Tensor gemm_op(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha) {
  Tensor out = run_gemm(bias, a, b, beta, alpha);
  if (compute_requires_grad({&bias, &a, &b})) {
    auto node = make_node<GemmBackward>({&bias, &a, &b});
    if (a.requires_grad()) node->b = b;
    if (b.requires_grad()) node->a = a;
    node->bias_shape = bias.defined() ? bias.shape() : Shape{};
    node->batch = out.size(0);
    node->batch_a = a.size(0);
    node->batch_b = b.size(0);
    node->m = a.size(1);
    node->k = a.size(2);
    node->n = b.size(2);
    node->a_transposed = is_transposed_layout(a);
    node->b_transposed = is_transposed_layout(b);
    node->alpha = alpha;
    node->beta = beta;
    set_history(out, node);
  }
  return out;
}

// ---- argument checks ----

void check_operand(std::string_view op, const char* what, const Tensor& t) {
  MT_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating ", what, " (f32, f64, f16, bf16), got ",
           dtype_name(t.dtype()), " ", shape_str(t.shape()), ". HINT: convert it with .to(kFloat32)");
  kernel_for(op, kGemm<float>, t.device());  // every dtype has kernels on the same devices
}

void check_pair(std::string_view op, const char* a_name, const Tensor& a, const char* b_name, const Tensor& b) {
  check_operand(op, a_name, a);
  check_operand(op, b_name, b);
  MT_CHECK(a.dtype() == b.dtype(), op, ": expected ", a_name, " and ", b_name, " to have the same dtype, got ",
           dtype_name(a.dtype()), " ", shape_str(a.shape()), " and ", dtype_name(b.dtype()), " ", shape_str(b.shape()),
           ". HINT: cast one with .to(", dtype_name(a.dtype()), "), or run under autocast");
  MT_CHECK(a.device() == b.device(), op, ": expected ", a_name, " and ", b_name, " on one device, got ",
           a.device().str(), " ", shape_str(a.shape()), " and ", b.device().str(), " ", shape_str(b.shape()),
           ". HINT: move both to one device with .to(device)");
}

void check_inner(std::string_view op, const Tensor& a, const Tensor& b, int64_t ka, int64_t kb) {
  MT_CHECK(ka == kb, op, ": cannot multiply ", shape_str(a.shape()), " by ", shape_str(b.shape()), ": inner sizes ", ka,
           " and ", kb, " differ");
}

void check_dims(std::string_view op, const Tensor& a, const Tensor& b, int64_t want, const char* hint) {
  MT_CHECK(a.dim() == want && b.dim() == want, op, ": expected ", want, "-D operands, got ", shape_str(a.shape()),
           " and ", shape_str(b.shape()), ". HINT: ", hint);
}

void check_bias(std::string_view op, const Tensor& bias, const Tensor& a, const Shape& out_shape) {
  check_operand(op, "bias", bias);
  MT_CHECK(bias.dtype() == a.dtype(), op, ": expected bias and the matrices to have the same dtype, got ",
           dtype_name(bias.dtype()), " and ", dtype_name(a.dtype()), ". HINT: cast the bias with .to(",
           dtype_name(a.dtype()), ")");
  MT_CHECK(bias.device() == a.device(), op, ": expected bias on ", a.device().str(), " with the matrices, got ",
           bias.device().str(), ". HINT: move it with .to(...)");
  bool ok = bias.dim() <= static_cast<int64_t>(out_shape.size());
  for (int64_t i = 1; ok && i <= bias.dim(); ++i) {
    const int64_t have = bias.shape()[bias.dim() - i], want = out_shape[out_shape.size() - i];
    ok = have == want || have == 1;
  }
  MT_CHECK(ok, op, ": bias ", shape_str(bias.shape()), " does not broadcast to the product's shape ",
           shape_str(out_shape));
}

}  // namespace

void check_linear(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_pair(op, "input", x, "weight", weight);
  MT_CHECK(weight.dim() == 2, op, ": expected a 2-D weight [out_features, in_features], got ",
           shape_str(weight.shape()));
  MT_CHECK(x.dim() >= 1, op, ": expected an input with at least 1 dim [..., in_features], got a 0-d tensor");
  const int64_t in = weight.size(1), out = weight.size(0);
  MT_CHECK(x.size(-1) == in, op, ": input ", shape_str(x.shape()), " has ", x.size(-1),
           " features in its last dim, but weight ", shape_str(weight.shape()), " expects ", in);
  if (bias.defined()) {
    check_bias(op, bias, x, {out});
    MT_CHECK(bias.dim() == 1, op, ": expected a 1-D bias [", out, "], got ", shape_str(bias.shape()));
  }
}

Tensor mm(const Tensor& a_in, const Tensor& b_in) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::mm, {a_in, b_in});
  const Tensor &a = in[0], &b = in[1];
  check_pair("mm", "self", a, "mat2", b);
  check_dims("mm", a, b, 2, "use bmm for 3-D or matmul for any rank");
  check_inner("mm", a, b, a.size(1), b.size(0));
  return gemm_op({}, a.unsqueeze(0), b.unsqueeze(0), 0.0, 1.0).view({a.size(0), b.size(1)});
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::bmm, {a_in, b_in});
  const Tensor &a = in[0], &b = in[1];
  check_pair("bmm", "self", a, "mat2", b);
  check_dims("bmm", a, b, 3, "use mm for 2-D or matmul for broadcast batches");
  MT_CHECK(a.size(0) == b.size(0), "bmm: batch sizes ", a.size(0), " and ", b.size(0), " of ", shape_str(a.shape()),
           " and ", shape_str(b.shape()), " differ. HINT: matmul broadcasts batch dims");
  check_inner("bmm", a, b, a.size(2), b.size(1));
  return gemm_op({}, a, b, 0.0, 1.0);
}

Tensor addmm(const Tensor& bias_in, const Tensor& a_in, const Tensor& b_in, double beta, double alpha) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::addmm, {bias_in, a_in, b_in});
  const Tensor &bias = in[0], &a = in[1], &b = in[2];
  check_pair("addmm", "mat1", a, "mat2", b);
  check_dims("addmm", a, b, 2, "use baddbmm for batches");
  check_inner("addmm", a, b, a.size(1), b.size(0));
  check_bias("addmm", bias, a, {a.size(0), b.size(1)});
  return gemm_op(bias, a.unsqueeze(0), b.unsqueeze(0), beta, alpha).view({a.size(0), b.size(1)});
}

Tensor baddbmm(const Tensor& bias_in, const Tensor& a_in, const Tensor& b_in, double beta, double alpha) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::baddbmm, {bias_in, a_in, b_in});
  const Tensor &bias = in[0], &a = in[1], &b = in[2];
  check_pair("baddbmm", "batch1", a, "batch2", b);
  check_dims("baddbmm", a, b, 3, "use addmm for 2-D");
  MT_CHECK(a.size(0) == b.size(0), "baddbmm: batch sizes ", a.size(0), " and ", b.size(0), " of ", shape_str(a.shape()),
           " and ", shape_str(b.shape()), " differ");
  check_inner("baddbmm", a, b, a.size(2), b.size(1));
  check_bias("baddbmm", bias, a, {a.size(0), a.size(1), b.size(2)});
  return gemm_op(bias, a, b, beta, alpha);
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  // FP8 training (ops/fp8/fp8.h) routes linear through an installed override, which must see the inputs before
  // autocast casts them (the weight as the f32 parameter it manages).
  if (Tensor routed = try_linear_override(x_in, weight_in, bias_in); routed.defined()) return routed;
  const std::vector<Tensor> cast = amp::cast_inputs(ops::linear, {x_in, weight_in, bias_in});
  const Tensor &x = cast[0], &weight = cast[1], &bias = cast[2];
  check_linear("linear", x, weight, bias);
  const int64_t in = weight.size(1), out = weight.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = out;
  const int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  // Fold every leading dim of x into the rows of one GEMM; weight^T goes in as a transpose flag.
  Tensor x3 = x.reshape({1, rows, in});
  return gemm_op(bias, x3, weight.t().unsqueeze(0), 1.0, 1.0).view(out_shape);
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::matmul, {a_in, b_in});
  const Tensor &a = in[0], &b = in[1];
  check_pair("matmul", "self", a, "other", b);
  MT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dim, got ", shape_str(a.shape()),
           " and ", shape_str(b.shape()), ". HINT: use mul for scalars");
  const int64_t k = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  check_inner("matmul", a, b, k, kb);
  // Promote 1-D operands to matrices: a [k] -> [1, k], b [k] -> [k, 1]; the added dim is dropped below.
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t m = a2.size(-2), n = b2.size(-1);
  const Shape batch_a(a2.shape().begin(), a2.shape().end() - 2), batch_b(b2.shape().begin(), b2.shape().end() - 2);
  const Shape batch = cpu::broadcast_shapes(batch_a, batch_b, "matmul");
  const int64_t nbatch = shape_numel(batch);

  Tensor out3;
  if (batch_b.empty() && !batch_a.empty() && (k == 1 || a2.stride(-1) == 1)) {
    // [..., m, k] @ [k, n]: fold a's batch into its rows, one GEMM (a view when a's strides allow).
    out3 = gemm_op({}, a2.reshape({1, nbatch * m, k}), b2.unsqueeze(0), 0.0, 1.0);
  } else {
    // A batch of GEMMs. An operand whose batch dims are all 1 broadcasts without a copy; one with the
    // full batch is viewed as [B, r, c]; a partial broadcast ([2, 1] with [1, 3]) is materialized.
    auto as_batched = [&](const Tensor& t, const Shape& own) {
      const int64_t r = t.size(-2), c = t.size(-1);
      if (shape_numel(own) == 1) return t.reshape({1, r, c});
      Shape full = batch;
      full.push_back(r);
      full.push_back(c);
      return t.expand(full).reshape({nbatch, r, c});
    };
    out3 = gemm_op({}, as_batched(a2, batch_a), as_batched(b2, batch_b), 0.0, 1.0);
  }
  Shape out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(m);
  if (b.dim() > 1) out_shape.push_back(n);
  return out3.view(out_shape);
}

// ---- dot ----

namespace {
struct DotBackward final : Node {
  SavedTensor self{this, "self"};
  SavedTensor other{this, "other"};
  std::string_view name() const override { return "DotBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    // g is 0-d in the operands' dtype: d/da = g b, d/db = g a.
    Tensor ga, gb;
    if (next_edges[0].valid()) ga = mul(other.get(), g[0]);
    if (next_edges[1].valid()) gb = mul(self.get(), g[0]);
    return {ga, gb};
  }
};

// dot on the CPU: one strided loop, accumulated in the compute type.
Tensor cpu_dot(const Tensor& a, const Tensor& b) {
  Tensor out = empty({}, {.dtype = a.dtype(), .device = a.device()});
  dispatch_floating(a.dtype(), "dot", [&]<typename T>() {
    using C = compute_t<T>;
    const T *ap = a.data<T>(), *bp = b.data<T>();
    const int64_t sa = a.stride(0), sb = b.stride(0);
    C acc = 0;
    for (int64_t i = 0; i < a.size(0); ++i) acc += static_cast<C>(ap[i * sa]) * static_cast<C>(bp[i * sb]);
    *out.data<T>() = static_cast<T>(acc);
  });
  return out;
}

// On a GPU: the GEMM [1, 1, n] @ [1, n, 1] (strided vectors go in as leading dims, not copies). It has
// no CUDA code of its own (run_gemm dispatches), so it needs no MT_CUDA_KERNEL.
Tensor device_dot(const Tensor& a, const Tensor& b) {
  return run_gemm({}, a.unsqueeze(0).unsqueeze(0), b.unsqueeze(0).unsqueeze(2), 0.0, 1.0).view({});
}

constexpr DeviceKernels<decltype(cpu_dot)> kDot{.cpu = &cpu_dot, .cuda = &device_dot};

}  // namespace

Tensor dot(const Tensor& a_in, const Tensor& b_in) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::dot, {a_in, b_in});
  const Tensor &a = in[0], &b = in[1];
  check_pair("dot", "self", a, "other", b);
  check_dims("dot", a, b, 1, "dot takes two 1-D vectors; use matmul or mm for matrices");
  MT_CHECK(a.size(0) == b.size(0), "dot: vectors ", shape_str(a.shape()), " and ", shape_str(b.shape()),
           " differ in length");
  Tensor out = dispatch("dot", kDot, a.device(), a, b);
  if (compute_requires_grad({&a, &b})) {
    auto node = make_node<DotBackward>({&a, &b});
    if (b.requires_grad()) node->self = a;
    if (a.requires_grad()) node->other = b;
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa

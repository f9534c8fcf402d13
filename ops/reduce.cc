// Reductions and their backward. One plan (ReducePlan) splits the input dims into kept and reduced;
// every output element reduces its slice with a strided inner walk, in parallel over outputs.
#include "ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/autocast.h"
#include "framework/autograd.h"
#include "framework/parallel.h"
#include "framework/strided.h"
#include "ops/cpu/column_sum.h"
#include "ops/elementwise.h"
#include "ops/device_map.h"

#ifdef MANTISSA_WITH_CUDA
#include "framework/cuda/stream.h"
#include "ops/cuda/elementwise_plan.h"
#include "ops/cuda/reduce.h"
#endif

namespace mantissa {
namespace {

// Accumulator for sums: double for f64, float otherwise (16-bit inputs compute in fp32).
template <typename T> using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

struct ReducePlan {
  std::vector<bool> reduce;  // per input dim: reduced
  Shape out_shape_keep;   // input shape with reduced dims set to 1
  Shape out_shape;        // as returned (reduced dims dropped unless keepdim)
  Shape kept_shape, kept_strides;      // outer dims (input strides)
  Shape reduced_shape, reduced_strides;
  int64_t reduced_numel = 1;
  bool leading_reduced = false;  // the reduced dims are exactly dims [0, k) for some k >= 1
};

ReducePlan make_plan(const Tensor& x, const Shape& dims_in, KeepDim keepdim, std::string_view op) {
  const int64_t nd = x.dim();
  std::vector<bool> reduce(std::max<int64_t>(nd, 1), false);
  if (dims_in.empty()) {
    std::fill(reduce.begin(), reduce.end(), true);
  }
  for (int64_t d : dims_in) {
    const int64_t w = wrap_dim(d, nd, op);
    MT_CHECK(!reduce[w] || dims_in.empty(), op, ": dim ", d, " appears twice in ", shape_str(dims_in));
    reduce[w] = true;
  }
  ReducePlan p;
  p.reduce = reduce;
  p.leading_reduced = nd >= 2 && reduce[0] && !reduce[nd - 1] &&
                      std::is_partitioned(reduce.begin(), reduce.end(), [](bool r) { return r; });
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t n = x.shape()[d], s = x.strides()[d];
    if (reduce[d]) {
      p.out_shape_keep.push_back(1);
      if (keepdim == KeepDim::kYes) p.out_shape.push_back(1);
      p.reduced_shape.push_back(n);
      p.reduced_strides.push_back(s);
      p.reduced_numel *= n;
    } else {
      p.out_shape_keep.push_back(n);
      p.out_shape.push_back(n);
      p.kept_shape.push_back(n);
      p.kept_strides.push_back(s);
    }
  }
  return p;
}

// Calls body(out_index, base_offset) for every output element, in parallel; base_offset is the input
// element offset (from x's data pointer) where that output's reduced slice starts.
template <typename F>
void for_each_output(const ReducePlan& p, int64_t grain, F&& body) {
  const int64_t n_out = shape_numel(p.kept_shape);
  parallel_for(n_out, grain, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      int64_t rem = o, base = 0;
      for (size_t d = p.kept_shape.size(); d-- > 0;) {
        base += (rem % p.kept_shape[d]) * p.kept_strides[d];
        rem /= p.kept_shape[d];
      }
      body(o, base);
    }
  });
}

// Calls f(value) for every element of one output's reduced slice, in memory order of the input.
template <typename T, typename F>
void for_each_reduced(const ReducePlan& p, const T* base, F&& f) {
  std::array<const Shape*, 1> st{&p.reduced_strides};
  strided_for_each<1>(p.reduced_shape, st, [&](int64_t n, const auto& off, const auto& s) {
    const T* q = base + off[0];
    if (s[0] == 1) {
      for (int64_t i = 0; i < n; ++i) f(q[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) f(q[i * s[0]]);
    }
  });
}

int64_t reduce_grain(const ReducePlan& p) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(p.reduced_numel, 1)); }

#ifdef MANTISSA_WITH_CUDA
// The plan's kept and reduced dims as the CUDA kernels' layout; inputs whose dims do not coalesce into
// kMaxDims are made contiguous first.
gpu::ReduceLayout cuda_layout(const Tensor& x, const ReducePlan& p, Tensor& storage) {
  if (auto l = gpu::plan_reduce(p.kept_shape, p.kept_strides, p.reduced_shape, p.reduced_strides)) {
    storage = x;
    return *l;
  }
  storage = x.contiguous();
  Shape kept_strides, reduced_strides;
  for (int64_t d = 0; d < storage.dim(); ++d) (p.reduce[d] ? reduced_strides : kept_strides).push_back(storage.stride(d));
  auto l = gpu::plan_reduce(p.kept_shape, kept_strides, p.reduced_shape, reduced_strides);
  MT_ASSERT(l.has_value(), "cuda_layout: a contiguous input did not plan");
  return *l;
}

Tensor cuda_sum(const Tensor& x, const ReducePlan& p, double scale) {
  Tensor out = empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() == 0) return out;
  Tensor xs;
  const gpu::ReduceLayout l = cuda_layout(x, p, xs);
  gpu::DeviceGuard guard(x.device());
  const gpu::ReduceGeometry g = gpu::sum_geometry(l, x.device().index);
  const DType acc = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  const Tensor workspace = g.splits > 1 ? empty({l.n_out * g.splits}, {.dtype = acc, .device = x.device()}) : Tensor();
  dispatch_floating(x.dtype(), "sum", [&]<typename T>() {
    gpu::launch_sum<T>(l, g, scale, xs.data<T>(), workspace.defined() ? workspace.data_ptr() : nullptr,
                       out.data<T>(), gpu::current_stream(x.device()));
  });
  return out;
}
#endif

Tensor sum_impl(const Tensor& x, const ReducePlan& p, double scale) {
#ifdef MANTISSA_WITH_CUDA
  if (x.device().is_cuda()) return cuda_sum(x, p, scale);
#endif
  MT_CHECK(x.device().is_cpu(), "sum: no kernel for ", x.device().str());
  Tensor out = empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()});
  dispatch_floating(x.dtype(), "sum", [&]<typename T>() {
    using A = acc_t<T>;
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    const int64_t cols = shape_numel(p.kept_shape);
    if (p.leading_reduced && x.is_contiguous() && cols >= 16) {
      // [rows, cols] summed over rows, e.g. a bias gradient: the vectorized column sum (same bits).
      cpu::column_sum<T, A>(xp, p.reduced_numel, cols, static_cast<A>(scale), op);
      return;
    }
    for_each_output(p, reduce_grain(p), [&](int64_t o, int64_t base) {
      // Blocked (pairwise-ish) summation: partial sums of 8 lanes keep f32 error low and vectorize.
      A lanes[8] = {};
      int64_t k = 0;
      for_each_reduced<T>(p, xp + base, [&](T v) { lanes[k++ & 7] += static_cast<A>(v); });
      A total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      op[o] = static_cast<T>(static_cast<A>(total * static_cast<A>(scale)));
    });
  });
  return out;
}

// Gradient of a reduction: g (reduced shape) expanded back to the input shape.
Tensor expand_back(const Tensor& g, const Shape& keep_shape, const Shape& input_shape) {
  return g.reshape(keep_shape).expand(input_shape);
}

struct SumBackward final : Node {
  Shape keep_shape, input_shape;
  double scale = 1.0;  // 1/N for mean
  std::string_view name() const override { return scale == 1.0 ? "SumBackward" : "MeanBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    Tensor gs = scale == 1.0 ? g[0] : mul(g[0], scale);
    return {expand_back(gs, keep_shape, input_shape).contiguous()};
  }
};

Tensor sum_or_mean(const Tensor& x_in, const Shape& dims, KeepDim keepdim, bool is_mean) {
  const std::string_view op = is_mean ? "mean" : "sum";
  const Tensor x = amp::cast_input(op, x_in);
  MT_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got ", dtype_name(x.dtype()));
  const ReducePlan p = make_plan(x, dims, keepdim, op);
  const double scale = is_mean ? 1.0 / static_cast<double>(p.reduced_numel) : 1.0;
  Tensor out = sum_impl(x, p, scale);
  if (compute_requires_grad({&x})) {
    auto node = make_node<SumBackward>({&x});
    node->keep_shape = p.out_shape_keep;
    node->input_shape = x.shape();
    node->scale = scale;
    set_history(out, node);
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) { return sum_or_mean(x, {}, KeepDim::kNo, false); }
Tensor sum(const Tensor& x, const Shape& dims, KeepDim keepdim) {
  MT_CHECK(!dims.empty(), "sum: dims is empty. HINT: call sum(x) to reduce all elements");
  return sum_or_mean(x, dims, keepdim, false);
}
Tensor mean(const Tensor& x) { return sum_or_mean(x, {}, KeepDim::kNo, true); }
Tensor mean(const Tensor& x, const Shape& dims, KeepDim keepdim) {
  MT_CHECK(!dims.empty(), "mean: dims is empty. HINT: call mean(x) to reduce all elements");
  return sum_or_mean(x, dims, keepdim, true);
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  MT_ASSERT(lead >= 0, "sum_to: ", shape_str(grad.shape()), " to ", shape_str(shape));
  Shape dims;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && grad.shape()[d] != 1)) dims.push_back(d);
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, KeepDim::kYes);
  return r.reshape(shape);
}

// ---- var ----

namespace {
struct VarBackward final : Node {
  SavedTensor self{this, "self"};
  SavedTensor mean_keep{this, "mean"};
  Shape keep_shape;
  double denom = 1.0;  // N - correction
  std::string_view name() const override { return "VarBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    // d var / dx = 2 (x - mean) / (N - correction)
    const double k = 2.0 / denom;
    Tensor gk = g[0].reshape(keep_shape);
    return {map_ternary(
        gk, self.get(), mean_keep.get(), "var_backward",
        [k](auto gv, auto x, auto m) { return gv * static_cast<decltype(gv)>(k) * (x - m); },
        {gpu::TernaryOp::kScaledDiffGrad, k})};
  }
};
}  // namespace

Tensor var(const Tensor& x, const Shape& dims, VarOptions options) {
  const int64_t correction = options.correction;
  const KeepDim keepdim = options.keepdim;
  MT_CHECK(is_floating(x.dtype()), "var: expected a floating tensor, got ", dtype_name(x.dtype()));
  const ReducePlan p = make_plan(x, dims, keepdim, "var");
  Tensor m = sum_impl(x, make_plan(x, dims, KeepDim::kYes, "var"), 1.0 / static_cast<double>(p.reduced_numel));
  Tensor out = empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()});
  const double denom = static_cast<double>(p.reduced_numel - correction);
  if (!x.device().is_cpu()) {
    // The same two passes from the device ops: centre on the (dtype-rounded) mean in the accumulation
    // type (f32, f64 for f64), square, and sum with the scale 1/denom, rounded once to the dtype.
    NoGradGuard no_grad;
    const DType ad = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
    const Tensor d = sub(x.to(ad), m.to(ad));
    const Tensor sq = mul(d, d);
    out = denom > 0 ? sum_impl(sq, make_plan(sq, dims, keepdim, "var"), 1.0 / denom).to(x.dtype())
                    : full(p.out_shape, std::numeric_limits<double>::quiet_NaN(),
                           {.dtype = x.dtype(), .device = x.device()});
  } else {
    dispatch_floating(x.dtype(), "var", [&]<typename T>() {
      using A = acc_t<T>;
      const T* xp = x.data<T>();
      const T* mp = m.data<T>();
      T* op = out.data<T>();
      for_each_output(p, reduce_grain(p), [&](int64_t o, int64_t base) {
        // Two-pass: centre on the (16-bit-rounded for f16/bf16 inputs) mean, then sum squares in A.
        const A mu = static_cast<A>(mp[o]);
        A acc = 0;
        for_each_reduced<T>(p, xp + base, [&](T v) {
          const A d = static_cast<A>(v) - mu;
          acc += d * d;
        });
        op[o] = static_cast<T>(denom > 0 ? acc / static_cast<A>(denom) : std::numeric_limits<A>::quiet_NaN());
      });
    });
  }
  if (compute_requires_grad({&x})) {
    auto node = make_node<VarBackward>({&x});
    node->self = x;
    node->mean_keep = m;
    node->keep_shape = p.out_shape_keep;
    node->denom = denom;
    set_history(out, node);
  }
  return out;
}
Tensor var(const Tensor& x, VarOptions options) { return var(x, Shape{}, options); }

// ---- max ----

namespace {
struct MaxDimBackward final : Node {
  SavedTensor indices{this, "indices"};  // keepdim shape
  Shape keep_shape, input_shape;
  int64_t dim = 0;
  std::string_view name() const override { return "MaxBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    const Tensor gk = g[0].reshape(keep_shape).contiguous();
    Tensor out = zeros(input_shape, {.dtype = gk.dtype(), .device = gk.device()});
    const Tensor& idx = indices.get();
    // out.select(dim, idx[o]) at each output position o = g[o]
    const int64_t outer = shape_numel(Shape(input_shape.begin(), input_shape.begin() + dim));
    const int64_t n = input_shape[dim];
    const int64_t inner = shape_numel(Shape(input_shape.begin() + dim + 1, input_shape.end()));
    if (gk.device().is_cuda()) {
      // g where the position along dim equals the saved index, else 0 (broadcast compare and select).
      Shape pos_shape(input_shape.size(), 1);
      pos_shape[dim] = n;
      const Tensor pos = arange(0.0, static_cast<double>(n)).reshape(pos_shape).to(gk.device());
      return {where(eq(pos, idx), gk, zeros({}, {.dtype = gk.dtype(), .device = gk.device()}))};
    }
    dispatch_floating(gk.dtype(), "max_backward", [&]<typename T>() {
      const T* gp = gk.data<T>();
      const int64_t* ip = idx.data<int64_t>();
      T* op = out.data<T>();
      for (int64_t a = 0; a < outer; ++a) {
        for (int64_t c = 0; c < inner; ++c) {
          const int64_t o = a * inner + c;
          op[(a * n + ip[o]) * inner + c] = gp[o];
        }
      }
    });
    return {out};
  }
};

struct MaxAllBackward final : Node {
  SavedTensor self{this, "self"};
  SavedTensor result{this, "result"};
  std::string_view name() const override { return "MaxBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    // The gradient is split evenly among all elements equal to the maximum.
    Tensor mask = eq(self.get(), result.get());
    const double count = sum(mask.to(DType::kF64)).item();
    return {where(mask, div(g[0], count), zeros({}, {.dtype = g[0].dtype(), .device = g[0].device()}))};
  }
};
}  // namespace

MaxResult max(const Tensor& x, int64_t dim, KeepDim keepdim) {
  MT_CHECK(x.numel() > 0, "max: cannot reduce an empty tensor of shape ", shape_str(x.shape()));
  const int64_t d = wrap_dim(dim, x.dim(), "max");
  const ReducePlan p = make_plan(x, {d}, keepdim, "max");
  MaxResult r{empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()}),
              empty(p.out_shape, {.dtype = DType::kI64, .device = x.device()})};
#ifdef MANTISSA_WITH_CUDA
  if (x.device().is_cuda()) {
    MT_CHECK(x.dtype() != DType::kBool, "max: no CUDA kernel for bool tensors. HINT: convert with .to(kInt32)");
    Tensor xs;
    const gpu::ReduceLayout l = cuda_layout(x, p, xs);
    gpu::DeviceGuard guard(x.device());
    dispatch_all(x.dtype(), "max", [&]<typename T>() {
      if constexpr (!std::is_same_v<T, bool>) {
        gpu::launch_max<T>(l, xs.data<T>(), r.values.data<T>(), r.indices.data<int64_t>(),
                           gpu::current_stream(x.device()));
      }
    });
  }
#endif
  MT_CHECK(x.device().is_cpu() || x.device().is_cuda(), "max: no kernel for ", x.device().str());
  if (x.device().is_cpu()) {
    const int64_t step = x.dim() == 0 ? 0 : x.strides()[d];
    const int64_t n = x.dim() == 0 ? 1 : x.shape()[d];
    dispatch_all(x.dtype(), "max", [&]<typename T>() {
      const T* xp = x.data<T>();
      T* vp = r.values.data<T>();
      int64_t* ip = r.indices.data<int64_t>();
      for_each_output(p, reduce_grain(p), [&](int64_t o, int64_t base) {
        using C = compute_t<T>;
        C best = static_cast<C>(xp[base]);
        int64_t bi = 0;
        for (int64_t i = 1; i < n; ++i) {
          const C v = static_cast<C>(xp[base + i * step]);
          if constexpr (std::is_floating_point_v<C>) {
            if (std::isnan(best)) break;  // nan propagates, as in PyTorch
            if (std::isnan(v) || v > best) { best = v; bi = i; }
          } else {
            if (v > best) { best = v; bi = i; }
          }
        }
        vp[o] = static_cast<T>(best);
        ip[o] = bi;
      });
    });
  }
  if (is_floating(x.dtype()) && compute_requires_grad({&x})) {
    auto node = make_node<MaxDimBackward>({&x});
    node->indices = r.indices.reshape(p.out_shape_keep);
    node->keep_shape = p.out_shape_keep;
    node->input_shape = x.shape();
    node->dim = x.dim() == 0 ? 0 : d;
    set_history(r.values, node);
  }
  return r;
}

Tensor argmax(const Tensor& x, int64_t dim, KeepDim keepdim) {
  NoGradGuard no_grad;
  return max(x, dim, keepdim).indices;
}

Tensor max(const Tensor& x) {
  MT_CHECK(x.numel() > 0, "max: cannot reduce an empty tensor");
  Tensor flat;
  {
    NoGradGuard no_grad;
    flat = max(x.reshape({-1}), 0, KeepDim::kNo).values;
  }
  if (compute_requires_grad({&x})) {
    auto node = make_node<MaxAllBackward>({&x});
    node->self = x;
    node->result = flat;
    set_history(flat, node);
  }
  return flat;
}

}  // namespace mantissa

// Reductions and their backward. One plan (cpu::ReducePlan) splits the input dims into kept and reduced;
// the kernels (ops/reduce/reduce_cpu.h, ops/reduce/reduce_cuda.h) reduce each output's slice.
#include "ops/reduce/reduce.h"

#include <algorithm>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "ops/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/typed_entries.h"
#include "ops/reduce/reduce_cpu.h"
#include "ops/reduce/reduce_cuda.h"
#include "ops/shape/shape.h"

namespace mantissa {
namespace {

using cpu::ReducePlan;

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

Tensor cpu_sum(const Tensor& x, const ReducePlan& p, double scale) {
  Tensor out = empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()});
  dispatch_floating(x.dtype(), "sum",
                    [&]<typename T>() { cpu::sum_reduce<T>(p, x.data<T>(), x.is_contiguous(), scale, out.data<T>()); });
  return out;
}

constexpr DeviceKernels<decltype(cpu_sum)> kSum{.cpu = &cpu_sum, .cuda = MT_CUDA_KERNEL(cuda_sum)};

Tensor sum_impl(const Tensor& x, const ReducePlan& p, double scale) {
  return dispatch("sum", kSum, x.device(), x, p, scale);
}

// Gradient of a reduction: g (reduced shape) expanded back to the input shape.
Tensor expand_back(const Tensor& g, const Shape& keep_shape, const Shape& input_shape) {
  return g.reshape(keep_shape).expand(input_shape);
}

struct SumBackward final : Node {
  Shape keep_shape, input_shape;
  double scale = 1.0;  // 1/N for mean
  std::string_view name() const override { return scale == 1.0 ? "SumBackward" : "MeanBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    Tensor gs = scale == 1.0 ? g[0] : mul(g[0], scale);
    return {expand_back(gs, keep_shape, input_shape).contiguous()};
  }
};

Tensor sum_or_mean(const Tensor& x_in, const Shape& dims, KeepDim keepdim, bool is_mean) {
  const OpInfo& info = is_mean ? ops::mean : ops::sum;
  const std::string_view op = info.name;
  const Tensor x = amp::cast_input(info, x_in);
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
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    // d var / dx = 2 (x - mean) / (N - correction)
    const double k = 2.0 / denom;
    Tensor gk = g[0].reshape(keep_shape);
    const Tensor& x = self.get();
    if (compute_requires_grad({&gk, &x})) {
      // create_graph: the saved mean has no history, so it is computed again from x (its dependence on x
      // is part of the second derivative). The reduced dims are the size-1 dims of keep_shape (a size-1 dim
      // of x gives the same mean either way).
      Shape dims;
      for (int64_t d = 0; d < static_cast<int64_t>(keep_shape.size()); ++d) {
        if (keep_shape[d] == 1) dims.push_back(d);
      }
      const Tensor m = dims.empty() ? mean(x) : mean(x, dims, KeepDim::kYes);
      return {mul(gk * (x - m), k)};
    }
    return {map_ternary(
        gk, x, mean_keep.get(), "var_backward",
        [k](auto gv, auto x, auto m) { return pointwise::scaled_diff_grad(static_cast<decltype(gv)>(k), gv, x, m); },
        {gpu::TernaryOp::kScaledDiffGrad, k})};
  }
};

Tensor cpu_var(const Tensor& x, const Tensor& mean, const ReducePlan& p, double denom) {
  Tensor out = empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()});
  dispatch_floating(x.dtype(), "var",
                    [&]<typename T>() { cpu::var_reduce<T>(p, x.data<T>(), mean.data<T>(), denom, out.data<T>()); });
  return out;
}

constexpr DeviceKernels<decltype(cpu_var)> kVar{.cpu = &cpu_var, .cuda = MT_CUDA_KERNEL(cuda_var)};
}  // namespace

Tensor var(const Tensor& x, const Shape& dims, VarOptions options) {
  const int64_t correction = options.correction;
  const KeepDim keepdim = options.keepdim;
  MT_CHECK(is_floating(x.dtype()), "var: expected a floating tensor, got ", dtype_name(x.dtype()));
  const ReducePlan p = make_plan(x, dims, keepdim, "var");
  Tensor m = sum_impl(x, make_plan(x, dims, KeepDim::kYes, "var"), 1.0 / static_cast<double>(p.reduced_numel));
  const double denom = static_cast<double>(p.reduced_numel - correction);
  Tensor out = dispatch("var", kVar, x.device(), x, m, p, denom);
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
Tensor cpu_max_backward(const Tensor& g, const Tensor& indices, const Shape& input_shape, int64_t dim) {
  Tensor out = zeros(input_shape, {.dtype = g.dtype(), .device = g.device()});
  const int64_t outer = shape_numel(Shape(input_shape.begin(), input_shape.begin() + dim));
  const int64_t n = input_shape[dim];
  const int64_t inner = shape_numel(Shape(input_shape.begin() + dim + 1, input_shape.end()));
  dispatch_floating(g.dtype(), "max_backward", [&]<typename T>() {
    cpu::max_backward_scatter<T>(g.data<T>(), indices.data<int64_t>(), outer, n, inner, out.data<T>());
  });
  return out;
}

constexpr DeviceKernels<decltype(cpu_max_backward)> kMaxBackward{.cpu = &cpu_max_backward,
                                                                 .cuda = MT_CUDA_KERNEL(cuda_max_backward)};

struct MaxDimBackward final : Node {
  SavedTensor indices{this, "indices"};  // keepdim shape
  Shape keep_shape, input_shape;
  int64_t dim = 0;
  std::string_view name() const override { return "MaxBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    const Tensor gk = g[0].reshape(keep_shape).contiguous();
    // The max of a 0-d tensor is itself. The kernels below index input_shape by dim, which a 0-d shape
    // does not have (out of bounds on both devices), so this case never reaches them.
    if (input_shape.empty()) return {gk.reshape(input_shape)};
    if (compute_requires_grad({&gk})) {
      // create_graph: the same scatter as a differentiable op (its gradient gathers at the indices).
      return {scatter_add(zeros(input_shape, {.dtype = gk.dtype(), .device = gk.device()}), dim, indices.get(), gk)};
    }
    return {dispatch("max_backward", kMaxBackward, gk.device(), gk, indices.get(), input_shape, dim)};
  }
};

void cpu_max(const Tensor& x, const ReducePlan& p, int64_t dim, const MaxResult& r) {
  const int64_t step = x.dim() == 0 ? 0 : x.strides()[dim];
  const int64_t n = x.dim() == 0 ? 1 : x.shape()[dim];
  dispatch_all(x.dtype(), "max", [&]<typename T>() {
    cpu::max_reduce<T>(p, x.data<T>(), n, step, r.values.data<T>(), r.indices.data<int64_t>());
  });
}

constexpr DeviceKernels<decltype(cpu_max)> kMax{.cpu = &cpu_max, .cuda = MT_CUDA_KERNEL(cuda_max)};

struct MaxAllBackward final : Node {
  SavedTensor self{this, "self"};
  SavedTensor result{this, "result"};
  std::string_view name() const override { return "MaxBackward"; }
  bool supports_create_graph() const override { return true; }  // where and div record under create_graph
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
  dispatch("max", kMax, x.device(), x, p, d, r);
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

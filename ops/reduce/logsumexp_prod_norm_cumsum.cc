// logsumexp, prod, norm (all fp32 under autocast) and cumsum, with their backward. The reductions move
// the reduced dims last and run a row kernel (ops/reduce/row_reduce_cpu.h) over the contiguous [m, n] matrix:
// m output elements, n reduced elements each. On a GPU, logsumexp and norm (and their backward) are
// composed from the device ops in the compute type (f32, f64 for f64) and rounded once at the end (the
// device entries of their tables); cumsum has its own kernel (ops/reduce/scan_cuda.h); prod has none.
#include <algorithm>
#include <cmath>
#include <limits>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "ops/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/typed_entries_cpu.h"
#include "ops/reduce/reduce.h"
#include "ops/reduce/row_reduce_cpu.h"
#include "ops/reduce/scan_cuda.h"
#include "ops/shape/shape.h"

namespace mantissa {
namespace {

struct RowPlan {
  Shape perm;            // kept dims in order, then reduced dims in order
  Shape permuted_shape;  // x's shape permuted by perm
  Shape keep_shape;      // x's shape with reduced dims set to 1
  Shape out_shape;       // as returned (reduced dims dropped unless keepdim)
  Shape dims;            // the reduced dims, wrapped and sorted
  int64_t m = 1, n = 1;
};

RowPlan plan_rows(const Tensor& x, const Shape& dims_in, KeepDim keepdim, std::string_view op) {
  const int64_t nd = x.dim();
  std::vector<bool> reduce(static_cast<size_t>(nd), dims_in.empty());
  for (int64_t d : dims_in) {
    const int64_t w = wrap_dim(d, std::max<int64_t>(nd, 1), op);
    MT_CHECK(nd == 0 || !reduce[w], op, ": dim ", d, " appears twice in ", shape_str(dims_in));
    if (nd > 0) reduce[w] = true;
  }
  RowPlan p;
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t size = x.size(d);
    p.keep_shape.push_back(reduce[d] ? 1 : size);
    if (!reduce[d] || keepdim == KeepDim::kYes) p.out_shape.push_back(reduce[d] ? 1 : size);
    if (reduce[d]) {
      p.dims.push_back(d);
      p.n *= size;
    } else {
      p.perm.push_back(d);
      p.m *= size;
    }
  }
  p.perm.insert(p.perm.end(), p.dims.begin(), p.dims.end());
  for (int64_t d : p.perm) p.permuted_shape.push_back(x.size(d));
  return p;
}

// x as the contiguous [m, n] matrix of its rows, recorded where x has history (create_graph).
Tensor rows_of(const Tensor& x, const RowPlan& p) { return x.permute(p.perm).contiguous().reshape({p.m, p.n}); }

// The same without history, for the kernels.
Tensor as_rows(const Tensor& x, const RowPlan& p) { return rows_of(x.detach(), p); }

// The inverse of as_rows for an [m, n] result: back to x's shape and dim order, contiguous.
Tensor from_rows(const Tensor& rows, const RowPlan& p) {
  Shape inverse(p.perm.size());
  for (size_t i = 0; i < p.perm.size(); ++i) inverse[static_cast<size_t>(p.perm[i])] = static_cast<int64_t>(i);
  return rows.reshape(p.permuted_shape).permute(inverse).contiguous();
}

// The compute dtype of the composed device paths.
DType compute_dtype(DType d) { return d == DType::kF64 ? DType::kF64 : DType::kF32; }

// Sign of x as 1 / 0 / -1 in its dtype (device ops).
Tensor sign_of(const Tensor& x) { return sub(gt(x, 0.0).to(x.dtype()), lt(x, 0.0).to(x.dtype())); }

// logsumexp of the [m, n] rows of x on a device: max-shifted as the CPU (a row whose max is infinite
// keeps the shift 0, so an all -inf row gives -inf and a +inf row +inf).
Tensor device_logsumexp(const Tensor& x, const RowPlan& p) {
  NoGradGuard no_grad;
  // max() refuses an empty input; the CPU kernel gives -inf for an empty row (the log of an empty sum).
  if (x.numel() == 0) {
    return full(p.out_shape, -std::numeric_limits<double>::infinity(), {.dtype = x.dtype(), .device = x.device()});
  }
  const Tensor r = as_rows(x, p).to(compute_dtype(x.dtype()));
  const Tensor mx = max(r, 1, KeepDim::kYes).values;
  const Tensor shift = masked_fill(mx, eq(abs(mx), std::numeric_limits<double>::infinity()), 0.0);
  return add(log(sum(exp(sub(r, shift)), {1}, KeepDim::kYes)), shift).reshape(p.out_shape).to(x.dtype());
}

// The p-norm of the [m, n] rows of x on a device, as cpu::norm_rows.
Tensor device_norm(const Tensor& x, const RowPlan& p, double pv) {
  NoGradGuard no_grad;
  // The norm of an empty row is 0 for every p, as in the CPU kernel (max() would refuse it for p = inf).
  if (x.numel() == 0) return zeros(p.out_shape, {.dtype = x.dtype(), .device = x.device()});
  const Tensor r = as_rows(x, p).to(compute_dtype(x.dtype()));
  Tensor n;
  if (std::isinf(pv)) {
    n = max(abs(r), 1).values;  // NaN propagates as in the CPU kernel
  } else if (pv == 2.0) {
    n = sqrt(sum(mul(r, r), {1}));
  } else if (pv == 1.0) {
    n = sum(abs(r), {1});
  } else {
    n = pow(sum(pow(abs(r), pv), {1}), 1.0 / pv);
  }
  return n.reshape(p.out_shape).to(x.dtype());
}

// Runs kernel(rows, m, n, out) in x's dtype (a CPU tensor) and returns the result in out_shape.
template <typename K>
Tensor reduce_rows(const Tensor& x, const RowPlan& p, std::string_view op, K&& kernel) {
  MT_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got ", dtype_name(x.dtype()));
  const Tensor rows = as_rows(x, p);
  Tensor out = empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()});
  dispatch_floating(x.dtype(), op, [&]<typename T>() { kernel(rows.data<T>(), p.m, p.n, out.data<T>()); });
  return out;
}

Tensor cpu_logsumexp(const Tensor& x, const RowPlan& p) {
  return reduce_rows(x, p, "logsumexp",
                     [](const auto* rows, int64_t m, int64_t n, auto* o) { cpu::logsumexp_rows(rows, m, n, o); });
}

Tensor cpu_norm(const Tensor& x, const RowPlan& p, double pv) {
  return reduce_rows(x, p, "norm",
                     [pv](const auto* rows, int64_t m, int64_t n, auto* o) { cpu::norm_rows(rows, m, n, pv, o); });
}

Tensor cpu_prod(const Tensor& x, const RowPlan& p) {
  return reduce_rows(x, p, "prod",
                     [](const auto* rows, int64_t m, int64_t n, auto* o) { cpu::prod_rows(rows, m, n, o); });
}

// The device entries are composed from device ops (no CUDA code of their own, so no MT_CUDA_KERNEL).
constexpr DeviceKernels<decltype(cpu_logsumexp)> kLogsumexp{.cpu = &cpu_logsumexp, .cuda = &device_logsumexp};
constexpr DeviceKernels<decltype(cpu_norm)> kNorm{.cpu = &cpu_norm, .cuda = &device_norm};
constexpr DeviceKernels<decltype(cpu_prod)> kProd{.cpu = &cpu_prod};

// d/dx logsumexp = exp(x - result): the softmax of the reduced slice (g and result in keep_shape).
Tensor cpu_logsumexp_backward(const Tensor& g, const Tensor& x, const Tensor& result) {
  return map_ternary(g, x, result, "logsumexp_backward",
                     [](auto gv, auto xv, auto r) { return gv * std::exp(xv - r); });
}

// The same from device ops in the compute type.
Tensor device_logsumexp_backward(const Tensor& g, const Tensor& x, const Tensor& result) {
  const DType cd = compute_dtype(x.dtype());
  return mul(g.to(cd), exp(sub(x.to(cd), result.to(cd)))).to(x.dtype());
}

template <typename T>
T sign_value(T v) {
  return v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0));
}

// The p-norm's gradient; max |x| (p = inf) shares it evenly among the elements that attain it.
Tensor cpu_norm_backward(const Tensor& g, const Tensor& x, const Tensor& r, const Shape& dims, double pv) {
  if (std::isinf(pv)) {
    const DType compute = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
    const Tensor hit = eq(abs(x), r).to(compute);
    const Tensor share = div(g.to(compute), sum(hit, dims, KeepDim::kYes));
    return map_ternary(share, x, hit, "NormBackward", [](auto gv, auto v, auto h) { return gv * sign_value(v) * h; })
        .to(x.dtype());
  }
  return map_ternary(g, x, r, "NormBackward", [pv](auto gv, auto v, auto n) {
    using C = decltype(gv);
    if (pv == 1.0) return gv * sign_value(v);
    if (n == C(0)) return C(0);
    if (pv == 2.0) return gv * v / n;
    return gv * sign_value(v) * std::pow(std::abs(v), C(pv - 1.0)) / std::pow(n, C(pv - 1.0));
  });
}

// The same formulas from device ops in the compute type; 0 where the norm is 0 (p > 1).
Tensor device_norm_backward(const Tensor& g, const Tensor& x, const Tensor& r, const Shape& dims, double pv) {
  const DType cd = compute_dtype(x.dtype());
  if (std::isinf(pv)) {
    const Tensor hit = eq(abs(x), r).to(cd);
    const Tensor share = div(g.to(cd), sum(hit, dims, KeepDim::kYes));
    return mul(mul(share, sign_of(x.to(cd))), hit).to(x.dtype());
  }
  const Tensor gc = g.to(cd), xc = x.to(cd), nc = r.to(cd);
  Tensor dx;
  if (pv == 1.0) {
    dx = mul(gc, sign_of(xc));
  } else if (pv == 2.0) {
    dx = masked_fill(div(mul(gc, xc), nc), eq(nc, 0.0), 0.0);
  } else {
    dx = masked_fill(div(mul(mul(gc, sign_of(xc)), pow(abs(xc), pv - 1.0)), pow(nc, pv - 1.0)), eq(nc, 0.0), 0.0);
  }
  return dx.to(x.dtype());
}

// The norm's gradient with differentiable ops (create_graph): the formulas of device_norm_backward, with
// the norm replaced by 1 where it is 0 (there x is 0 and the result is masked to 0 anyway), so that no
// 0/0 sits under the mask to turn the second derivative into NaN.
Tensor graph_norm_backward(const Tensor& g, const Tensor& x, const Tensor& r, const Shape& dims, double pv) {
  if (std::isinf(pv) || pv == 1.0) return device_norm_backward(g, x, r, dims, pv);  // linear in g, x only in masks
  const DType cd = compute_dtype(x.dtype());
  const Tensor gc = g.to(cd), xc = x.to(cd), nc = r.to(cd);
  const Tensor zero_norm = eq(nc, 0.0);
  const Tensor n_safe = masked_fill(nc, zero_norm, 1.0);
  const Tensor dx = pv == 2.0 ? div(mul(gc, xc), n_safe)
                              : div(mul(mul(gc, sign_of(xc)), pow(abs(xc), pv - 1.0)), pow(n_safe, pv - 1.0));
  return masked_fill(dx, zero_norm, 0.0).to(x.dtype());
}

// prod_{j != i} x_j for every element of the [m, n] rows, with differentiable ops (create_graph): the
// product of the elements before i times that of the elements after i, each a running product of the row
// shifted by one, built in log2(n) shifted multiplications (Hillis-Steele). No division, so a zero in the
// row needs no special case, and every derivative of the result is exact.
Tensor exclusive_products(const Tensor& rows) {
  const int64_t m = rows.size(0), n = rows.size(1);
  if (n <= 1) return ones_like(rows);  // an empty product: constant
  auto pad = [&](int64_t k) { return ones({m, k}, {.dtype = rows.dtype(), .device = rows.device()}); };
  Tensor before = cat({pad(1), rows.narrow(1, 0, n - 1)}, 1);  // [1, x_0, ..., x_{n-2}]
  Tensor after = cat({rows.narrow(1, 1, n - 1), pad(1)}, 1);   // [x_1, ..., x_{n-1}, 1]
  for (int64_t s = 1; s < n; s *= 2) {
    before = mul(before, cat({pad(s), before.narrow(1, 0, n - s)}, 1));
    after = mul(after, cat({after.narrow(1, s, n - s), pad(s)}, 1));
  }
  return mul(before, after);
}

constexpr DeviceKernels<decltype(cpu_logsumexp_backward)> kLogsumexpBackward{.cpu = &cpu_logsumexp_backward,
                                                                             .cuda = &device_logsumexp_backward};
constexpr DeviceKernels<decltype(cpu_norm_backward)> kNormBackward{.cpu = &cpu_norm_backward,
                                                                   .cuda = &device_norm_backward};

struct LogsumexpBackward final : Node {
  SavedTensor self{this, "self"};
  SavedTensor result{this, "result"};  // the output itself, so that it unpacks with history (create_graph)
  Shape keep_shape;
  std::string_view name() const override { return "LogsumexpBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    const Tensor& x = self.get();
    const Tensor r = result.get().reshape(keep_shape);
    const Tensor gk = g[0].reshape(keep_shape);
    // create_graph: the device formula is made of differentiable ops, whatever the device.
    if (compute_requires_grad({&gk, &x, &r})) return {device_logsumexp_backward(gk, x, r)};
    return {dispatch(name(), kLogsumexpBackward, x.device(), gk, x, r)};
  }
};

struct ProdBackward final : Node {
  SavedTensor self{this, "self"};
  RowPlan plan;
  std::string_view name() const override { return "ProdBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    const Tensor& x = self.get();
    if (compute_requires_grad({&g[0], &x})) {
      // create_graph: the products of the others, in the compute type, weighted by the row's upstream value.
      const DType cd = compute_dtype(x.dtype());
      const Tensor excl = exclusive_products(rows_of(x, plan).to(cd));
      return {from_rows(mul(excl, g[0].to(cd).reshape({plan.m, 1})), plan).to(x.dtype())};
    }
    const Tensor rows = as_rows(x, plan);
    Tensor dx_rows = empty({plan.m, plan.n}, {.dtype = x.dtype(), .device = x.device()});
    dispatch_floating(x.dtype(), name(), [&]<typename T>() {
      using C = compute_t<T>;
      // One upstream value per row: the kept dims keep their order, so g's row-major order is row order.
      const Tensor gr = g[0].to(dtype_v<C>).contiguous();
      cpu::prod_backward_rows<T>(rows.data<T>(), gr.data<C>(), plan.m, plan.n, dx_rows.data<T>());
    });
    return {from_rows(dx_rows, plan)};
  }
};

struct NormBackward final : Node {
  SavedTensor self{this, "self"};
  SavedTensor result{this, "result"};  // the output itself, so that it unpacks with history (create_graph)
  Shape keep_shape, dims;
  double p = 2.0;
  std::string_view name() const override { return "NormBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& x = self.get();
    const Tensor r = result.get().reshape(keep_shape);
    const Tensor gk = grads[0].reshape(keep_shape);
    if (compute_requires_grad({&gk, &x, &r})) return {graph_norm_backward(gk, x, r, dims, p)};
    return {dispatch(name(), kNormBackward, x.device(), gk, x, r, dims, p)};
  }
};

struct CumsumBackward final : Node {
  int64_t dim = 0;
  std::string_view name() const override { return "CumsumBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override;
};

void cpu_scan(const Tensor& x, int64_t outer, int64_t n, int64_t inner, cpu::ScanDirection direction,
              const Tensor& out) {
  dispatch_floating(x.dtype(), "cumsum", [&]<typename T>() {
    cpu::cumsum_lines<T>(x.data<T>(), outer, n, inner, direction, out.data<T>());
  });
}

constexpr DeviceKernels<decltype(cpu_scan)> kScan{.cpu = &cpu_scan, .cuda = MT_CUDA_KERNEL(cuda_scan)};

// cumsum along `dim` of contiguous x in either direction.
Tensor scan(const Tensor& x_in, int64_t dim, cpu::ScanDirection direction) {
  const Tensor x = x_in.contiguous();
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (x.dim() == 0) {
    copy_(out, x);
    return out;
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim) outer *= x.size(d);
    if (d > dim) inner *= x.size(d);
  }
  dispatch("cumsum", kScan, x.device(), x, outer, x.size(dim), inner, direction, out);
  return out;
}

std::vector<Tensor> CumsumBackward::apply(std::vector<Tensor>&& g) {
  // Each input element feeds every output at or after it: the gradient is the reverse running sum.
  if (compute_requires_grad({&g[0]})) {
    // create_graph: the same sum recorded, as a cumsum between two reversals along dim.
    if (g[0].dim() == 0) return {g[0]};
    const Tensor reversed = arange(static_cast<double>(g[0].size(dim) - 1), -1.0, -1.0);
    return {index_select(cumsum(index_select(g[0], dim, reversed), dim), dim, reversed)};
  }
  return {scan(g[0], dim, cpu::ScanDirection::kReverse)};
}

Tensor norm_impl(const Tensor& x_in, NormOptions options) {
  const Tensor x = amp::cast_input(ops::norm, x_in);
  MT_CHECK(options.p > 0.0, "norm: p must be positive (or INFINITY), got ", options.p);
  const RowPlan plan = plan_rows(x, options.dims, options.keepdim, "norm");
  const double p = options.p;
  MT_CHECK(is_floating(x.dtype()), "norm: expected a floating tensor, got ", dtype_name(x.dtype()));
  Tensor out = dispatch("norm", kNorm, x.device(), x, plan, p);
  if (compute_requires_grad({&x})) {
    auto node = make_node<NormBackward>({&x});
    node->self = x;
    node->result = out;
    node->keep_shape = plan.keep_shape;
    node->dims = plan.dims;
    node->p = p;
    set_history(out, node);
  }
  return out;
}

Tensor prod_impl(const Tensor& x_in, const Shape& dims, KeepDim keepdim) {
  const Tensor x = amp::cast_input(ops::prod, x_in);
  const RowPlan plan = plan_rows(x, dims, keepdim, "prod");
  MT_CHECK(is_floating(x.dtype()), "prod: expected a floating tensor, got ", dtype_name(x.dtype()));
  Tensor out = dispatch("prod", kProd, x.device(), x, plan);
  if (compute_requires_grad({&x})) {
    auto node = make_node<ProdBackward>({&x});
    node->self = x;
    node->plan = plan;
    set_history(out, node);
  }
  return out;
}

}  // namespace

Tensor logsumexp(const Tensor& x_in, const Shape& dims, KeepDim keepdim) {
  const Tensor x = amp::cast_input(ops::logsumexp, x_in);
  const RowPlan plan = plan_rows(x, dims, keepdim, "logsumexp");
  MT_CHECK(is_floating(x.dtype()), "logsumexp: expected a floating tensor, got ", dtype_name(x.dtype()));
  Tensor out = dispatch("logsumexp", kLogsumexp, x.device(), x, plan);
  if (compute_requires_grad({&x})) {
    auto node = make_node<LogsumexpBackward>({&x});
    node->self = x;
    node->result = out;
    node->keep_shape = plan.keep_shape;
    set_history(out, node);
  }
  return out;
}

Tensor prod(const Tensor& x) { return prod_impl(x, {}, KeepDim::kNo); }
Tensor prod(const Tensor& x, int64_t dim, KeepDim keepdim) {
  MT_CHECK(x.dim() > 0 || dim == 0 || dim == -1, "prod: dim ", dim, " is out of range for a 0-d tensor");
  return prod_impl(x, x.dim() == 0 ? Shape{} : Shape{dim}, keepdim);
}

Tensor norm(const Tensor& x, NormOptions options) { return norm_impl(x, std::move(options)); }

Tensor cumsum(const Tensor& x_in, int64_t dim_in) {
  const Tensor x = amp::cast_input(ops::cumsum, x_in);
  MT_CHECK(is_floating(x.dtype()), "cumsum: expected a floating tensor, got ", dtype_name(x.dtype()));
  kernel_for("cumsum", kScan, x.device());
  const int64_t dim = x.dim() == 0 ? 0 : wrap_dim(dim_in, x.dim(), "cumsum");
  Tensor out;
  {
    NoGradGuard no_grad;  // the scan works on a history-less contiguous copy
    out = scan(x.detach(), dim, cpu::ScanDirection::kForward);
  }
  if (compute_requires_grad({&x})) {
    auto node = make_node<CumsumBackward>({&x});
    node->dim = dim;
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa

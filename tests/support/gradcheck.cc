// Gradcheck: analytic vector-Jacobian products from the autograd engine against f64 central differences.
#include "tests/support/gradcheck.h"

#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

#include "framework/autograd.h"
#include "framework/generator.h"

namespace mantissa::testing {
namespace {

const char* layout_name(InputLayout l) {
  switch (l) {
    case InputLayout::kContiguous: return "contiguous";
    case InputLayout::kTransposed: return "transposed";
    case InputLayout::kStrided: return "strided";
  }
  return "?";
}

// Row-major multi-index of flat element `i` of `shape`.
Shape unravel(int64_t i, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] == 0 ? 0 : i % shape[d];
    i = shape[d] == 0 ? 0 : i / shape[d];
  }
  return idx;
}

// Element offset (from data_ptr) of flat element `i` of `t`, following its strides.
int64_t element_offset(const Tensor& t, int64_t i) {
  const Shape idx = unravel(i, t.shape());
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  return off;
}

// A leaf with `src`'s values laid out as `layout` says. Returns the layout actually used: 0-d tensors are
// always contiguous, and 1-d tensors have nothing to transpose, so they are strided instead.
Tensor lay_out(const Tensor& src, InputLayout layout, InputLayout* used) {
  const int64_t nd = src.dim();
  if (nd == 0) layout = InputLayout::kContiguous;
  if (nd == 1 && layout == InputLayout::kTransposed) layout = InputLayout::kStrided;
  *used = layout;
  Tensor view;
  switch (layout) {
    case InputLayout::kContiguous: view = empty(src.shape(), {.dtype = DType::kF64}); break;
    case InputLayout::kTransposed: {
      Shape swapped = src.shape();
      std::swap(swapped[nd - 1], swapped[nd - 2]);
      view = full(swapped, NAN, {.dtype = DType::kF64}).transpose(-1, -2);
      break;
    }
    case InputLayout::kStrided: {
      // Twice as large in every dim plus one leading row, filled with nan: an op that reads outside the view
      // produces nan and fails the check.
      Shape big = src.shape();
      for (int64_t d = 0; d < nd; ++d) big[d] = 2 * big[d] + (d == 0 ? 1 : 0);
      view = full(big, NAN, {.dtype = DType::kF64});
      for (int64_t d = 0; d < nd; ++d) {
        const int64_t start = d == 0 ? 1 : 0;
        view = view.slice(d, start, start + 2 * src.shape()[d], 2);
      }
      break;
    }
  }
  copy_(view, src);
  return view;  // a view of a buffer without history: a leaf
}

double dot(const Tensor& out, const std::vector<double>& go) {
  const std::vector<double> v = values_f64(out);
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * go[i];
  return s;
}

}  // namespace

std::vector<double> values_f64(const Tensor& t) {
  NoGradGuard no_grad;
  MT_CHECK(t.dtype() == DType::kF64, "values_f64: expected an f64 tensor, got ", dtype_name(t.dtype()));
  const Tensor c = t.contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

Tensor random_input(const Shape& shape, uint64_t seed, RandomInputOptions options) {
  Generator gen(seed);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) {
    x = options.low + (options.high - options.low) * gen.uniform_double();
    if (std::abs(x) < options.min_abs) x = x < 0 ? x - options.min_abs : x + options.min_abs;
  }
  return from_vector<double>(v, shape);
}

::testing::AssertionResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& options) {
  const size_t n = inputs.size();
  std::vector<bool> diff(n);
  for (size_t k = 0; k < n; ++k) {
    diff[k] = options.differentiate.empty() ? is_floating(inputs[k].dtype()) : options.differentiate.at(k);
    if (diff[k] && inputs[k].dtype() != DType::kF64) {
      return ::testing::AssertionFailure() << "gradcheck: input " << k << " is " << dtype_name(inputs[k].dtype())
                                           << "; differentiated inputs must be f64";
    }
  }

  std::ostringstream failures;
  failures << std::setprecision(10);
  int failed = 0;
  for (InputLayout layout : options.layouts) {
    std::vector<Tensor> xs(n);
    std::vector<InputLayout> used(n, InputLayout::kContiguous);
    for (size_t k = 0; k < n; ++k) {
      if (!diff[k]) {
        xs[k] = inputs[k];
        continue;
      }
      xs[k] = lay_out(inputs[k], layout, &used[k]);
      xs[k].set_requires_grad(true);
    }

    // Analytic: backward with a random grad_output gives grad_output^T J for every input.
    const Tensor out = fn(xs);
    if (!out.defined() || out.dtype() != DType::kF64) {
      return ::testing::AssertionFailure() << "gradcheck: the function must return an f64 tensor, got "
                                           << (out.defined() ? dtype_name(out.dtype()) : "undefined");
    }
    Generator gen(options.seed);
    std::vector<double> go(static_cast<size_t>(out.numel()));
    for (double& g : go) g = 2.0 * gen.uniform_double() - 1.0;
    if (out.requires_grad()) out.backward(from_vector<double>(go, out.shape()));

    for (size_t k = 0; k < n; ++k) {
      if (!diff[k]) continue;
      Tensor x = xs[k];
      const Tensor& g = x.grad();
      if (g.defined() && (g.shape() != x.shape() || g.dtype() != DType::kF64)) {
        return ::testing::AssertionFailure()
               << "gradcheck: input " << k << " got a gradient of " << shape_str(g.shape()) << " "
               << dtype_name(g.dtype()) << " for a tensor of " << shape_str(x.shape()) << " f64";
      }
      const std::vector<double> analytic =
          g.defined() ? values_f64(g) : std::vector<double>(static_cast<size_t>(x.numel()), 0.0);

      // Numerical: perturb each element in place through the view (so the layout is kept) and re-run.
      NoGradGuard no_grad;
      double* base = static_cast<double*>(x.data_ptr());
      for (int64_t i = 0; i < x.numel(); ++i) {
        double& xi = base[element_offset(x, i)];
        const double orig = xi;
        xi = orig + options.eps;
        const double fp = dot(fn(xs), go);
        xi = orig - options.eps;
        const double fm = dot(fn(xs), go);
        xi = orig;
        const double numeric = (fp - fm) / (2.0 * options.eps);
        const double a = analytic[static_cast<size_t>(i)];
        const double tol = options.atol + options.rtol * std::abs(numeric);
        if (!(std::abs(a - numeric) <= tol)) {
          if (failed < options.max_reported) {
            failures << "\n  input " << k << " " << shape_str(x.shape()) << " (" << layout_name(used[k])
                     << "), element " << shape_str(unravel(i, x.shape())) << ": analytic " << a << " vs numerical "
                     << numeric << " (|diff| " << std::abs(a - numeric) << " > tol " << tol << ")"
                     << (g.defined() ? "" : " [no gradient reached this input]");
          }
          ++failed;
        }
      }
    }
  }
  if (failed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "gradcheck: " << failed << " gradient element(s) disagree" << failures.str();
}

}  // namespace mantissa::testing

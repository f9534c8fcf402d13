// Gradcheck and gradgradcheck: analytic vector-Jacobian products (and their own gradients, through
// create_graph) from the autograd engine against f64 central differences.
#include "tests/support/gradcheck.h"

#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

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

// Which inputs are differentiated; a failure when one of them is not f64.
::testing::AssertionResult differentiated(const std::vector<Tensor>& inputs, const GradcheckOptions& options,
                                          std::vector<bool>* diff) {
  diff->assign(inputs.size(), false);
  for (size_t k = 0; k < inputs.size(); ++k) {
    (*diff)[k] = options.differentiate.empty() ? is_floating(inputs[k].dtype()) : options.differentiate.at(k);
    if ((*diff)[k] && inputs[k].dtype() != DType::kF64) {
      return ::testing::AssertionFailure() << "gradcheck: input " << k << " is " << dtype_name(inputs[k].dtype())
                                           << "; differentiated inputs must be f64";
    }
  }
  return ::testing::AssertionSuccess();
}

// The inputs as `fn` gets them in one layout: each differentiated input laid out (the layout it got in
// (*used)[k]) and requiring grad, the others as given.
std::vector<Tensor> laid_out_inputs(const std::vector<Tensor>& inputs, const std::vector<bool>& diff,
                                    InputLayout layout, std::vector<InputLayout>* used) {
  std::vector<Tensor> xs(inputs.size());
  used->assign(inputs.size(), InputLayout::kContiguous);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!diff[k]) {
      xs[k] = inputs[k];
      continue;
    }
    xs[k] = lay_out(inputs[k], layout, &(*used)[k]);
    xs[k].set_requires_grad(true);
  }
  return xs;
}

std::vector<double> uniform_pm1(Generator& gen, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = 2.0 * gen.uniform_double() - 1.0;
  return v;
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
  std::vector<bool> diff;
  if (::testing::AssertionResult ok = differentiated(inputs, options, &diff); !ok) return ok;

  std::ostringstream failures;
  failures << std::setprecision(10);
  int failed = 0;
  for (InputLayout layout : options.layouts) {
    std::vector<InputLayout> used;
    const std::vector<Tensor> xs = laid_out_inputs(inputs, diff, layout, &used);

    // Analytic: backward with a random grad_output gives grad_output^T J for every input.
    const Tensor out = fn(xs);
    if (!out.defined() || out.dtype() != DType::kF64) {
      return ::testing::AssertionFailure() << "gradcheck: the function must return an f64 tensor, got "
                                           << (out.defined() ? dtype_name(out.dtype()) : "undefined");
    }
    Generator gen(options.seed);
    const std::vector<double> go = uniform_pm1(gen, out.numel());
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

::testing::AssertionResult gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                                         const GradcheckOptions& options) {
  const size_t n = inputs.size();
  std::vector<bool> diff;
  if (::testing::AssertionResult ok = differentiated(inputs, options, &diff); !ok) return ok;

  std::ostringstream failures;
  failures << std::setprecision(10);
  int failed = 0;
  for (InputLayout layout : options.layouts) {
    std::vector<InputLayout> used;
    const std::vector<Tensor> xs = laid_out_inputs(inputs, diff, layout, &used);
    std::vector<Tensor> wrt;  // the differentiated inputs, then v
    std::vector<std::string> names;
    for (size_t k = 0; k < n; ++k) {
      if (!diff[k]) continue;
      wrt.push_back(xs[k]);
      names.push_back("input " + std::to_string(k) + " " + shape_str(xs[k].shape()) + " (" + layout_name(used[k]) +
                      ")");
    }
    const std::vector<Tensor> xs_diff = wrt;

    const Tensor y = fn(xs);
    if (!y.defined() || y.dtype() != DType::kF64) {
      return ::testing::AssertionFailure() << "gradgradcheck: the function must return an f64 tensor, got "
                                           << (y.defined() ? dtype_name(y.dtype()) : "undefined");
    }
    Generator gen(options.seed);
    Tensor v = from_vector<double>(uniform_pm1(gen, y.numel()), y.shape()).set_requires_grad(true);
    std::vector<Tensor> u;
    for (const Tensor& x : xs_diff) u.push_back(from_vector<double>(uniform_pm1(gen, x.numel()), x.shape()));
    wrt.push_back(v);
    names.push_back("grad_output " + shape_str(v.shape()));

    // s = sum_k <grad(y, x_k; v), u_k>, with history when create_graph. A y without history has zero
    // first derivatives.
    auto weighted_first_order = [&](const Tensor& out, bool create_graph) {
      Tensor s = zeros({}, {.dtype = DType::kF64});
      if (!out.requires_grad()) return s;
      const std::vector<Tensor> g =
          grad(out, xs_diff, {.grad_outputs = {v}, .create_graph = create_graph, .allow_unused = true});
      for (size_t k = 0; k < g.size(); ++k) {
        if (g[k].defined()) s = s + sum(g[k] * u[k]);
      }
      return s;
    };

    // Analytic: the gradient of s through the create_graph gradients.
    const Tensor s = weighted_first_order(y, true);
    std::vector<Tensor> analytic(wrt.size());
    if (s.requires_grad()) analytic = grad(s, wrt, {.allow_unused = true});

    for (size_t j = 0; j < wrt.size(); ++j) {
      Tensor t = wrt[j];
      const Tensor& a_t = analytic[j];
      if (a_t.defined() && (a_t.shape() != t.shape() || a_t.dtype() != DType::kF64)) {
        return ::testing::AssertionFailure() << "gradgradcheck: " << names[j] << " got a second-order gradient of "
                                             << shape_str(a_t.shape()) << " " << dtype_name(a_t.dtype());
      }
      const std::vector<double> a_vals =
          a_t.defined() ? values_f64(a_t) : std::vector<double>(static_cast<size_t>(t.numel()), 0.0);
      // Numerical: perturb one element in place (through the view, so the layout is kept) and evaluate s
      // again from a fresh forward and a first-order grad().
      double* base = static_cast<double*>(t.data_ptr());
      for (int64_t i = 0; i < t.numel(); ++i) {
        double& ti = base[element_offset(t, i)];
        const double orig = ti;
        ti = orig + options.eps;
        const double sp = weighted_first_order(fn(xs), false).item();
        ti = orig - options.eps;
        const double sm = weighted_first_order(fn(xs), false).item();
        ti = orig;
        const double numeric = (sp - sm) / (2.0 * options.eps);
        const double a = a_vals[static_cast<size_t>(i)];
        const double tol = options.atol + options.rtol * std::abs(numeric);
        if (!(std::abs(a - numeric) <= tol)) {
          if (failed < options.max_reported) {
            failures << "\n  " << names[j] << ", element " << shape_str(unravel(i, t.shape())) << ": analytic " << a
                     << " vs numerical " << numeric << " (|diff| " << std::abs(a - numeric) << " > tol " << tol << ")"
                     << (a_t.defined() ? "" : " [no second-order gradient reached it]");
          }
          ++failed;
        }
      }
    }
  }
  if (failed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "gradgradcheck: " << failed << " second-order gradient element(s) disagree"
                                       << failures.str();
}

}  // namespace mantissa::testing

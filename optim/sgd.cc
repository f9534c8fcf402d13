// SGD step: a plain kernel over raw pointers, called per parameter under NoGradGuard.
#include "optim/sgd.h"

#include <cmath>
#include <set>

#include "framework/autograd.h"
#include "framework/error.h"

namespace mantissa {
namespace {

enum class FirstStep { kNo, kYes };

// The update in T. PyTorch's CPU add(a, b, alpha) computes a + alpha * b as one fused multiply-add in
// its vectorized loop, so std::fma reproduces it; mul_(momentum) rounds on its own, as there.
template <typename T>
void sgd_kernel(T* p, const T* g, T* buf, int64_t n, const SGDOptions& o, FirstStep first) {
  const T wd = static_cast<T>(o.weight_decay), m = static_cast<T>(o.momentum);
  const T one_minus_damp = static_cast<T>(1.0 - o.dampening), neg_lr = static_cast<T>(-o.lr);
  for (int64_t i = 0; i < n; ++i) {
    T d = o.weight_decay != 0.0 ? std::fma(wd, p[i], g[i]) : g[i];
    if (o.momentum != 0.0) {
      buf[i] = first == FirstStep::kYes ? d : std::fma(one_minus_damp, d, buf[i] * m);
      d = o.nesterov ? std::fma(m, buf[i], d) : buf[i];
    }
    p[i] = std::fma(neg_lr, d, p[i]);
  }
}

}  // namespace

SGD::SGD(std::vector<NamedTensor> params, SGDOptions options) : params_(std::move(params)), options_(options) {
  MT_CHECK(options.lr >= 0.0, "SGD: invalid learning rate ", options.lr);
  MT_CHECK(options.momentum >= 0.0, "SGD: invalid momentum ", options.momentum);
  MT_CHECK(options.weight_decay >= 0.0, "SGD: invalid weight_decay ", options.weight_decay);
  MT_CHECK(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
           "SGD: Nesterov momentum requires a momentum and zero dampening, got momentum ", options.momentum,
           " dampening ", options.dampening);
  std::set<std::string> names;
  for (const auto& [name, t] : params_) {
    MT_CHECK(names.insert(name).second, "SGD: parameter '", name, "' is given twice");
    MT_CHECK(t.defined() && t.is_leaf() && t.requires_grad(), "SGD: parameter '", name,
             "' must be a leaf tensor that requires grad. HINT: pass model.named_parameters()");
    MT_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kF64, "SGD: parameter '", name, "' is ",
             dtype_name(t.dtype()), "; SGD updates fp32 (or f64) master weights. HINT: keep masters in fp32 and "
             "let autocast make the 16-bit copies");
  }
}

void SGD::step() {
  NoGradGuard no_grad;
  for (const auto& [name, param] : params_) {
    if (!param.grad().defined()) continue;
    const Tensor g = param.grad().contiguous();  // a grad may be an expanded or strided view
    Tensor p = param.is_contiguous() ? param : param.contiguous();
    FirstStep first = FirstStep::kNo;
    Tensor& buf = momentum_buffers_[name];
    if (options_.momentum != 0.0 && !buf.defined()) {
      buf = empty(param.shape(), {.dtype = param.dtype()});
      first = FirstStep::kYes;
    }
    if (p.dtype() == DType::kF32) {
      sgd_kernel(p.data<float>(), g.data<float>(), buf.defined() ? buf.data<float>() : nullptr, p.numel(),
                 options_, first);
    } else {
      sgd_kernel(p.data<double>(), g.data<double>(), buf.defined() ? buf.data<double>() : nullptr, p.numel(),
                 options_, first);
    }
    if (!p.is_same(param)) copy_(param, p);
  }
}

void SGD::zero_grad() {
  for (auto& entry : params_) entry.tensor.set_grad(Tensor());
}

Tensor SGD::momentum_buffer(const std::string& name) const {
  auto it = momentum_buffers_.find(name);
  return it == momentum_buffers_.end() ? Tensor() : it->second;
}

}  // namespace mantissa

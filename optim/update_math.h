// The per-element optimizer updates (SGD, Adam/AdamW, Lion): the one place each update is written. The
// CPU loops (optim/cpu/optim_kernels.cc) and the CUDA kernels (optim/cuda/fused_optim.cu) both call these
// inline functions, per element. Every rounding is spelled out (framework/rounding.h), so the result does
// not depend on the compiler's contraction setting: PyTorch's CPU sequence, one fused multiply-add where
// PyTorch computes `a + alpha * b`, a rounding after every other op. tests/optim/update_math_test.cc checks
// the CPU kernels (built with -ffp-contract=off) against these functions built with g++'s default
// contraction, driven as the CUDA kernels drive them.
#pragma once

#include <cmath>
#include <cstdint>

#include "framework/host_device.h"
#include "framework/rounding.h"

// The element functions are always inlined: the CPU loops vectorize only with the whole update in the loop
// body, and GCC's inliner, left to itself, keeps some of the many flag variants as calls.
#if defined(__CUDACC__)
#define MT_UPDATE_INLINE __host__ __device__ __forceinline__
#else
#define MT_UPDATE_INLINE inline __attribute__((always_inline))
#endif

namespace mantissa::update_math {

// The rounded operations of framework/rounding.h, under the names the update code uses.
using rn::add;
using rn::div;
using rn::fma;
using rn::mul;
using rn::sqrt;

// torch.maximum: nan wins. One select and no branch, so the CPU loop that calls it vectorizes (a nan a is
// taken by the second test, a nan b by the select's else).
template <typename T>
MT_UPDATE_INLINE T maximum(T a, T b) {
  return (a > b) | (a != a) ? a : b;
}

// SGD's per-step constants in T, as sgd_step builds them.
template <typename T>
struct SgdConstants {
  T inv, wd, momentum, one_minus_dampening, neg_lr;
};
template <typename T>
MT_HD inline SgdConstants<T> sgd_constants(double lr, double momentum, double dampening, double weight_decay, T inv) {
  return {inv, static_cast<T>(weight_decay), static_cast<T>(momentum), static_cast<T>(1.0 - dampening),
          static_cast<T>(-lr)};
}
// Which parts of SGD's update run. use_buffer: momentum and not the parameter's first step (the first
// step sets buf = d, PyTorch's clone).
struct SgdFlags {
  bool scaled, decay, momentum, use_buffer, nesterov;
};

// One element: returns the new parameter; writes the momentum buffer when flags.momentum.
template <typename T>
MT_UPDATE_INLINE T sgd_element(T p, T g, T& buf, const SgdConstants<T>& c, SgdFlags f) {
  T d = g;
  if (f.scaled) d = mul(d, c.inv);   // what unscale_ writes into the grad
  if (f.decay) d = fma(c.wd, p, d);  // d_p.add(param, alpha=weight_decay)
  if (f.momentum) {
    // buf.mul_(momentum).add_(d_p, alpha=1 - dampening); the first step: buf = d_p
    const T b = f.use_buffer ? fma(c.one_minus_dampening, d, mul(buf, c.momentum)) : d;
    buf = b;
    d = f.nesterov ? fma(c.momentum, b, d) : b;  // d_p.add(buf, alpha=momentum) or buf
  }
  return fma(c.neg_lr, d, p);  // param.add_(d_p, alpha=-lr)
}

// Adam's per-step constants in T (the f64 ones rounded to T), as adam_step builds them.
template <typename T>
struct AdamConstants {
  T inv, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size, wd, decay;
};
// l2: Adam's weight decay added to the grad; decoupled: AdamW's p *= 1 - lr * wd (each only when wd != 0).
struct AdamFlags {
  bool scaled, amsgrad, l2, decoupled;
};

// The step-dependent part of Adam's constants, from the step count after this step's increment, in
// double as PyTorch's Python floats are. pow: glibc's on the host, CUDA's on the device (both within
// 1 ulp in double, far below the f32 rounding these values go through).
struct AdamStepValues {
  double bc2_sqrt, neg_step_size;
};
MT_HD inline AdamStepValues adam_step_values(double lr, double beta1, double beta2, int64_t step) {
#if defined(__CUDA_ARCH__)
  const double power1 = ::pow(beta1, static_cast<double>(step)), power2 = ::pow(beta2, static_cast<double>(step));
#else
  const double power1 = std::pow(beta1, static_cast<double>(step)), power2 = std::pow(beta2, static_cast<double>(step));
#endif
  const double bias_correction1 = add(1.0, -power1), bias_correction2 = add(1.0, -power2);
  return {sqrt(bias_correction2), -div(lr, bias_correction1)};
}

template <typename T>
MT_HD inline AdamConstants<T> adam_constants(double lr, double beta1, double beta2, double eps, double weight_decay,
                                             T inv, AdamStepValues step) {
  return {inv,
          static_cast<T>(beta1),
          static_cast<T>(1.0 - beta1),
          static_cast<T>(beta2),
          static_cast<T>(1.0 - beta2),
          static_cast<T>(step.bc2_sqrt),
          static_cast<T>(eps),
          static_cast<T>(step.neg_step_size),
          static_cast<T>(weight_decay),
          static_cast<T>(add(1.0, -mul(lr, weight_decay)))};
}

// One element: returns the new parameter; writes the moments (and the running maximum when amsgrad).
template <typename T>
MT_UPDATE_INLINE T adam_element(T p, T g, T& m, T& v, T& vmax, const AdamConstants<T>& c, AdamFlags f) {
  T gi = f.scaled ? mul(g, c.inv) : g;
  T pi = f.decoupled ? mul(p, c.decay) : p;                  // param.mul_(1 - lr * weight_decay)
  if (f.l2) gi = fma(c.wd, pi, gi);                          // grad.add(param, alpha=weight_decay)
  m = fma(c.one_minus_beta1, gi, mul(m, c.beta1));           // exp_avg.mul_(b1).add_(g, alpha=1-b1)
  v = fma(mul(c.one_minus_beta2, gi), gi, mul(v, c.beta2));  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
  T second = v;
  if (f.amsgrad) {
    second = maximum(vmax, v);  // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
    vmax = second;
  }
  const T denom = add(div(sqrt(second), c.bc2_sqrt), c.eps);  // (v.sqrt() / bc2_sqrt).add_(eps)
  return add(pi, div(mul(c.neg_step_size, m), denom));        // param.addcdiv_(exp_avg, denom, -step_size)
}

// Lion's per-step constants in T (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"; the
// rounding order of lucidrains/lion-pytorch, the PyTorch reference).
template <typename T>
struct LionConstants {
  T inv, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_lr, decay;
};
// scaled: inv_scale is applied to the grad; decay: weight_decay != 0 (p *= 1 - lr * weight_decay).
struct LionFlags {
  bool scaled, decay;
};
template <typename T>
MT_HD inline LionConstants<T> lion_constants(double lr, double beta1, double beta2, double weight_decay, T inv) {
  return {inv,
          static_cast<T>(beta1),
          static_cast<T>(1.0 - beta1),
          static_cast<T>(beta2),
          static_cast<T>(1.0 - beta2),
          static_cast<T>(-lr),
          static_cast<T>(add(1.0, -mul(lr, weight_decay)))};
}

// sign(x): -1, 0 or 1; nan stays nan, so a non-finite grad shows in the parameters instead of freezing
// them (torch.sign maps nan to 0). Selects only, so the CPU loop vectorizes.
template <typename T>
MT_UPDATE_INLINE T sign(T x) {
  const T s = x > T(0) ? T(1) : T(0);
  const T t = x < T(0) ? T(-1) : s;
  return x != x ? x : t;
}

// One element: returns the new parameter; writes the momentum m. The update direction uses the old m.
template <typename T>
MT_UPDATE_INLINE T lion_element(T p, T g, T& m, const LionConstants<T>& c, LionFlags f) {
  const T gi = f.scaled ? mul(g, c.inv) : g;
  const T pi = f.decay ? mul(p, c.decay) : p;                     // p.mul_(1 - lr * wd)
  const T u = sign(fma(c.one_minus_beta1, gi, mul(m, c.beta1)));  // m.mul(b1).add(g, alpha=1-b1).sign_()
  m = fma(c.one_minus_beta2, gi, mul(m, c.beta2));                // m.mul_(b2).add_(g, alpha=1-b2)
  return fma(c.neg_lr, u, pi);                                    // p.add_(u, alpha=-lr)
}

// The non-finite test of the unscale pass: exponent bits all ones (inf or nan).
MT_HD inline bool is_non_finite_bits(uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u; }

}  // namespace mantissa::update_math

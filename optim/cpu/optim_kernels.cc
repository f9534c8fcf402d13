// Optimizer and grad-scaling kernels over raw pointers. The float32 arithmetic follows PyTorch 1.13's
// single-tensor CPU path op by op: where PyTorch computes `a + alpha * b` (add with alpha, addcmul) its
// compiled kernels contract it into one fused multiply-add, so std::fma stands there; everything else
// rounds after each op. This file is compiled with -ffp-contract=off (CMakeLists.txt), so no other
// contraction sneaks in (GCC's default would fuse e.g. AdamW's p * decay into the final add), and with
// -fno-math-errno so the loops with sqrt vectorize.
#include "optim/cpu/optim_kernels.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "framework/convert.h"
#include "framework/parallel.h"
#include "optim/norm_order.h"

namespace mantissa::cpu {
namespace {

constexpr int64_t kGrain = int64_t{1} << 15;  // elements per thread worth a fork for a streaming update

constexpr int64_t kCopyBlock = int64_t{1} << 13;  // 32 KiB of f32: updated values are still in L1/L2

// Runs update(b, e) over [begin, end); with a working copy, in blocks each followed by its rounding into
// the copy, so the copy costs a 16-bit write and no second read of the master from memory.
template <typename T, typename F>
void update_range(const T* param, WorkingCopyOut copy, int64_t begin, int64_t end, F&& update) {
  if constexpr (std::is_same_v<T, float>) {
    if (copy.data != nullptr) {
      for (int64_t b = begin; b < end; b += kCopyBlock) {
        const int64_t e = std::min(end, b + kCopyBlock);
        update(b, e);
        if (copy.dtype == CopyDType::kF16) {
          convert(param + b, static_cast<Half*>(copy.data) + b, e - b);
        } else {
          convert(param + b, static_cast<BFloat16*>(copy.data) + b, e - b);
        }
      }
      return;
    }
  }
  update(begin, end);
}

// Calls f(std::bool_constant<b>{}) so the loop below is compiled once per case with no branch inside.
template <typename F>
void with_flag(bool b, F&& f) {
  if (b) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

bool skipped(const ScalingPointers& s) { return s.found_inf != nullptr && *s.found_inf != 0.0f; }

// torch.maximum: nan wins.
template <typename T>
T maximum(T a, T b) {
  const T larger = a > b ? a : b;
  return a != a || b != b ? a + b : larger;  // a + b: the nan (a select, so the loop still vectorizes)
}

template <typename T>
struct SgdConstants {
  T inv, wd, momentum, one_minus_dampening, neg_lr;
};

// Elements [begin, end) of one SGD update. kUseBuffer: momentum and not the first step (the first
// step sets buf = d, PyTorch's clone).
template <typename T, bool kScaled, bool kDecay, bool kMomentum, bool kUseBuffer, bool kNesterov>
void sgd_elements(const SgdPointers<T>& t, const SgdConstants<T>& c, int64_t begin, int64_t end) {
  T* __restrict p = t.param;
  const T* __restrict g = t.grad;
  T* __restrict buf = t.momentum_buffer;
  for (int64_t i = begin; i < end; ++i) {
    T d = g[i];
    if constexpr (kScaled) d = d * c.inv;               // what unscale_ writes into the grad
    if constexpr (kDecay) d = std::fma(c.wd, p[i], d);  // d_p.add(param, alpha=weight_decay)
    if constexpr (kMomentum) {
      // buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
      const T b = kUseBuffer ? std::fma(c.one_minus_dampening, d, buf[i] * c.momentum) : d;
      buf[i] = b;
      d = kNesterov ? std::fma(c.momentum, b, d) : b;  // d_p.add(buf, alpha=momentum) or buf
    }
    p[i] = std::fma(c.neg_lr, d, p[i]);  // param.add_(d_p, alpha=-lr)
  }
}

// Adam's per-step constants in T (and the f64 ones rounded to T), as PyTorch passes them to its kernels.
template <typename T>
struct AdamConstants {
  T inv, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size, wd, decay;
};

// Elements [begin, end) of one Adam update; a plain function (no captures) so GCC vectorizes it.
template <typename T, bool kScaled, bool kAmsgrad, bool kL2, bool kDecoupled>
void adam_elements(const AdamPointers<T>& t, const AdamConstants<T>& c, int64_t begin, int64_t end) {
  T* __restrict p = t.param;
  const T* __restrict g = t.grad;
  T* __restrict m = t.exp_avg;
  T* __restrict v = t.exp_avg_sq;
  T* __restrict vmax = t.max_exp_avg_sq;
  for (int64_t i = begin; i < end; ++i) {
    T gi = g[i];
    if constexpr (kScaled) gi = gi * c.inv;
    T pi = p[i];
    if constexpr (kDecoupled) pi = pi * c.decay;                        // param.mul_(1 - lr * weight_decay)
    if constexpr (kL2) gi = std::fma(c.wd, pi, gi);                     // grad.add(param, alpha=weight_decay)
    const T mi = std::fma(c.one_minus_beta1, gi, m[i] * c.beta1);       // exp_avg.mul_(b1).add_(g, alpha=1-b1)
    const T vi = std::fma(c.one_minus_beta2 * gi, gi, v[i] * c.beta2);  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
    m[i] = mi;
    v[i] = vi;
    T second = vi;
    if constexpr (kAmsgrad) {
      second = maximum(vmax[i], vi);  // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
      vmax[i] = second;
    }
    const T denom = std::sqrt(second) / c.bc2_sqrt + c.eps;  // (v.sqrt() / bc2_sqrt).add_(eps)
    p[i] = pi + (c.neg_step_size * mi) / denom;              // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

}  // namespace

template <typename T>
void sgd_step(const SgdPointers<T>& t, const SGDOptions& o, ScalingPointers s) {
  if (skipped(s)) return;
  const bool first = *t.step == 0;
  *t.step += 1;
  const SgdConstants<T> c{.inv = s.inv_scale ? static_cast<T>(*s.inv_scale) : T(1),
                          .wd = static_cast<T>(o.weight_decay),
                          .momentum = static_cast<T>(o.momentum),
                          .one_minus_dampening = static_cast<T>(1.0 - o.dampening),
                          .neg_lr = static_cast<T>(-o.lr)};
  const bool momentum = o.momentum != 0.0;
  with_flag(s.inv_scale != nullptr, [&](auto scaled) {
    with_flag(o.weight_decay != 0.0, [&](auto decay) {
      with_flag(momentum && !first, [&](auto use_buffer) {
        with_flag(momentum && o.nesterov, [&](auto nesterov) {
          parallel_for(t.n, kGrain, [&](int64_t begin, int64_t end) {
            update_range(t.param, t.copy, begin, end, [&](int64_t b, int64_t e) {
              if (momentum) {
                sgd_elements<T, scaled(), decay(), true, use_buffer(), nesterov()>(t, c, b, e);
              } else {
                sgd_elements<T, scaled(), decay(), false, false, false>(t, c, b, e);
              }
            });
          });
        });
      });
    });
  });
}

template <typename T>
void adam_step(const AdamPointers<T>& t, const AdamOptions& o, WeightDecay mode, ScalingPointers s) {
  if (skipped(s)) return;
  const int64_t step = (*t.step += 1);
  // Python floats in PyTorch: bias corrections, step size and sqrt(bias_correction2) in double.
  const double bias_correction1 = 1.0 - std::pow(o.betas[0], static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(o.betas[1], static_cast<double>(step));
  const double step_size = o.lr / bias_correction1;
  const AdamConstants<T> c{.inv = s.inv_scale ? static_cast<T>(*s.inv_scale) : T(1),
                           .beta1 = static_cast<T>(o.betas[0]),
                           .one_minus_beta1 = static_cast<T>(1.0 - o.betas[0]),
                           .beta2 = static_cast<T>(o.betas[1]),
                           .one_minus_beta2 = static_cast<T>(1.0 - o.betas[1]),
                           .bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2)),
                           .eps = static_cast<T>(o.eps),
                           .neg_step_size = static_cast<T>(-step_size),
                           .wd = static_cast<T>(o.weight_decay),
                           .decay = static_cast<T>(1.0 - o.lr * o.weight_decay)};
  // AdamW multiplies by (1 - lr * 0) = 1 when weight_decay is 0: skipping it gives the same values.
  const bool l2 = mode == WeightDecay::kL2 && o.weight_decay != 0.0;
  const bool decoupled = mode == WeightDecay::kDecoupled && o.weight_decay != 0.0;
  with_flag(s.inv_scale != nullptr, [&](auto scaled) {
    with_flag(o.amsgrad, [&](auto amsgrad) {
      with_flag(l2, [&](auto use_l2) {
        with_flag(decoupled, [&](auto use_decoupled) {
          parallel_for(t.n, kGrain, [&](int64_t begin, int64_t end) {
            update_range(t.param, t.copy, begin, end, [&](int64_t b, int64_t e) {
              adam_elements<T, scaled(), amsgrad(), use_l2(), use_decoupled()>(t, c, b, e);
            });
          });
        });
      });
    });
  });
}

template <typename T>
void norm_partials(const T* g, int64_t n, NormPartial what, double* partials) {
  using norm_order::kBlock;
  using norm_order::kBlockLanes;
  parallel_for(norm_order::blocks(n), 8, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const T* x = g + b * kBlock;
      const int64_t len = std::min(kBlock, n - b * kBlock);
      if (what == NormPartial::kMaxAbs) {
        double mx = 0.0;
        bool nan = false;
        for (int64_t i = 0; i < len; ++i) {
          const double a = std::abs(double(x[i]));
          nan |= std::isnan(a);
          mx = std::max(mx, a);
        }
        partials[b] = nan ? NAN : mx;
        continue;
      }
      // norm_order's level 1: lane j takes elements j, j + kBlockLanes, ... in turn (the inner loop runs
      // over the lanes, so it vectorizes), then the lanes are folded.
      double lanes[kBlockLanes] = {};
      for (int64_t base = 0; base < len; base += kBlockLanes) {
        const int64_t m = std::min<int64_t>(kBlockLanes, len - base);
        for (int64_t j = 0; j < m; ++j) lanes[j] = norm_order::add_square(lanes[j], double(x[base + j]));
      }
      partials[b] = norm_order::fold(lanes, kBlockLanes, [](double a, double c) { return a + c; });
    }
  });
}

double combine_partials(const double* partials, int64_t count, NormPartial what) {
  if (what == NormPartial::kMaxAbs) {
    double mx = 0.0;
    for (int64_t p = 0; p < count; ++p) mx = norm_order::max_nan(mx, partials[p]);
    return mx;
  }
  using norm_order::kTotalLanes;
  double lanes[kTotalLanes] = {};
  for (int64_t base = 0; base < count; base += kTotalLanes) {
    const int64_t m = std::min<int64_t>(kTotalLanes, count - base);
    for (int64_t j = 0; j < m; ++j) lanes[j] += partials[base + j];
  }
  return norm_order::fold(lanes, kTotalLanes, [](double a, double c) { return a + c; });
}

template <typename T>
void scale(T* g, int64_t n, double coef) {
  const T c = static_cast<T>(coef);
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) g[i] = g[i] * c;
  });
}

template <typename T>
void clamp_abs(T* g, int64_t n, double limit) {
  const T hi = static_cast<T>(limit), lo = -hi;
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) g[i] = std::isnan(g[i]) ? g[i] : std::min(std::max(g[i], lo), hi);
  });
}

#define MT_OPTIM_KERNELS(T)                                                                             \
  template void sgd_step<T>(const SgdPointers<T>&, const SGDOptions&, ScalingPointers);                 \
  template void adam_step<T>(const AdamPointers<T>&, const AdamOptions&, WeightDecay, ScalingPointers); \
  template void norm_partials<T>(const T*, int64_t, NormPartial, double*);                              \
  template void scale<T>(T*, int64_t, double);                                                          \
  template void clamp_abs<T>(T*, int64_t, double);
MT_OPTIM_KERNELS(float)
MT_OPTIM_KERNELS(double)
#undef MT_OPTIM_KERNELS

}  // namespace mantissa::cpu

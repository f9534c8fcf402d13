// Optimizer and grad-scaling kernels over raw pointers. The float32 arithmetic follows PyTorch 1.13's
// single-tensor CPU path op by op: where PyTorch computes `a + alpha * b` (add with alpha, addcmul) its
// compiled kernels contract it into one fused multiply-add, so std::fma stands there; everything else
// rounds after each op. The build uses -ffp-contract=off (ISO C++), so no other contraction sneaks in.
#include "optim/cpu/optim_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <vector>

#include "framework/parallel.h"

namespace mantissa::cpu {
namespace {

constexpr int64_t kGrain = int64_t{1} << 15;  // elements per thread worth a fork for a streaming update
constexpr int64_t kBlock = int64_t{1} << 14;  // fixed reduction block: sums independent of thread count

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
  return std::isnan(a) || std::isnan(b) ? a + b : std::max(a, b);
}

}  // namespace

template <typename T>
void sgd_step(const SgdPointers<T>& t, const SGDOptions& o, ScalingPointers s) {
  if (skipped(s)) return;
  const bool first = *t.step == 0;
  *t.step += 1;
  const T inv = s.inv_scale ? static_cast<T>(*s.inv_scale) : T(1);
  const T wd = static_cast<T>(o.weight_decay), m = static_cast<T>(o.momentum);
  const T one_minus_damp = static_cast<T>(1.0 - o.dampening), neg_lr = static_cast<T>(-o.lr);
  const bool decay = o.weight_decay != 0.0, momentum = o.momentum != 0.0, nesterov = o.nesterov;
  with_flag(s.inv_scale != nullptr, [&](auto scaled) {
    with_flag(momentum, [&](auto use_momentum) {
      parallel_for(t.n, kGrain, [&](int64_t begin, int64_t end) {
        T* __restrict p = t.param;
        const T* __restrict g = t.grad;
        T* __restrict buf = t.momentum_buffer;
        for (int64_t i = begin; i < end; ++i) {
          T d = g[i];
          if constexpr (scaled) d = d * inv;  // what unscale_ writes into the grad
          if (decay) d = std::fma(wd, p[i], d);  // d_p.add(param, alpha=wd)
          if constexpr (use_momentum) {
            // buf.mul_(momentum).add_(d_p, alpha=1 - dampening); the first step clones d_p instead.
            buf[i] = first ? d : std::fma(one_minus_damp, d, buf[i] * m);
            d = nesterov ? std::fma(m, buf[i], d) : buf[i];
          }
          p[i] = std::fma(neg_lr, d, p[i]);  // param.add_(d_p, alpha=-lr)
        }
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
  const T inv = s.inv_scale ? static_cast<T>(*s.inv_scale) : T(1);
  const T beta1 = static_cast<T>(o.betas[0]), one_minus_beta1 = static_cast<T>(1.0 - o.betas[0]);
  const T beta2 = static_cast<T>(o.betas[1]), one_minus_beta2 = static_cast<T>(1.0 - o.betas[1]);
  const T bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2)), eps = static_cast<T>(o.eps);
  const T neg_step_size = static_cast<T>(-step_size), wd = static_cast<T>(o.weight_decay);
  const T decay = static_cast<T>(1.0 - o.lr * o.weight_decay);
  // AdamW multiplies by (1 - lr * 0) = 1 when weight_decay is 0: skipping it gives the same values.
  const bool l2 = mode == WeightDecay::kL2 && o.weight_decay != 0.0;
  const bool decoupled = mode == WeightDecay::kDecoupled && o.weight_decay != 0.0;
  with_flag(s.inv_scale != nullptr, [&](auto scaled) {
    with_flag(o.amsgrad, [&](auto amsgrad) {
      parallel_for(t.n, kGrain, [&](int64_t begin, int64_t end) {
        T* __restrict p = t.param;
        const T* __restrict g = t.grad;
        T* __restrict m = t.exp_avg;
        T* __restrict v = t.exp_avg_sq;
        T* __restrict vmax = t.max_exp_avg_sq;
        for (int64_t i = begin; i < end; ++i) {
          T gi = g[i];
          if constexpr (scaled) gi = gi * inv;
          T pi = p[i];
          if (decoupled) pi = pi * decay;           // param.mul_(1 - lr * weight_decay)
          if (l2) gi = std::fma(wd, pi, gi);        // grad.add(param, alpha=weight_decay)
          const T mi = std::fma(one_minus_beta1, gi, m[i] * beta1);     // exp_avg.mul_(b1).add_(g, alpha=1-b1)
          const T vi = std::fma(one_minus_beta2 * gi, gi, v[i] * beta2);  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
          m[i] = mi;
          v[i] = vi;
          T second = vi;
          if constexpr (amsgrad) {
            second = maximum(vmax[i], vi);  // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
            vmax[i] = second;
          }
          const T denom = std::sqrt(second) / bc2_sqrt + eps;  // (v.sqrt() / bc2_sqrt).add_(eps)
          p[i] = pi + (neg_step_size * mi) / denom;            // param.addcdiv_(exp_avg, denom, value=-step_size)
        }
      });
    });
  });
}

template <typename T>
void check_finite(const T* g, int64_t n, float* found_inf) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    bool bad = false;
    for (int64_t i = begin; i < end; ++i) bad |= !std::isfinite(g[i]);
    if (bad) std::atomic_ref<float>(*found_inf).store(1.0f, std::memory_order_relaxed);
  });
}

template <typename T>
void unscale_and_check(T* g, int64_t n, const float* inv_scale, float* found_inf) {
  const T inv = static_cast<T>(*inv_scale);
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    bool bad = false;
    for (int64_t i = begin; i < end; ++i) {
      bad |= !std::isfinite(g[i]);
      g[i] = g[i] * inv;
    }
    if (bad) std::atomic_ref<float>(*found_inf).store(1.0f, std::memory_order_relaxed);
  });
}

template <typename T>
void norm_parts(const T* g, int64_t n, double* sum_squares, double* max_abs) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> sums(blocks), maxes(blocks);
  parallel_for(blocks, 8, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
      double acc[8] = {}, mx = 0.0;
      bool nan = false;
      int64_t i = begin;
      for (; i + 8 <= end; i += 8)  // eight running sums in a fixed order: vectorizes, stays deterministic
        for (int j = 0; j < 8; ++j) acc[j] += double(g[i + j]) * double(g[i + j]);
      for (; i < end; ++i) acc[0] += double(g[i]) * double(g[i]);
      for (i = begin; i < end; ++i) {
        const double a = std::abs(double(g[i]));
        nan |= std::isnan(a);
        mx = std::max(mx, a);
      }
      sums[b] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      maxes[b] = nan ? NAN : mx;
    }
  });
  double total = 0.0, mx = 0.0;
  for (int64_t b = 0; b < blocks; ++b) {
    total += sums[b];
    mx = std::isnan(maxes[b]) || std::isnan(mx) ? NAN : std::max(mx, maxes[b]);
  }
  *sum_squares = total;
  *max_abs = mx;
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

#define MT_OPTIM_KERNELS(T)                                                                      \
  template void sgd_step<T>(const SgdPointers<T>&, const SGDOptions&, ScalingPointers);          \
  template void adam_step<T>(const AdamPointers<T>&, const AdamOptions&, WeightDecay, ScalingPointers); \
  template void check_finite<T>(const T*, int64_t, float*);                                      \
  template void unscale_and_check<T>(T*, int64_t, const float*, float*);                         \
  template void norm_parts<T>(const T*, int64_t, double*, double*);                              \
  template void scale<T>(T*, int64_t, double);                                                   \
  template void clamp_abs<T>(T*, int64_t, double);
MT_OPTIM_KERNELS(float)
MT_OPTIM_KERNELS(double)
#undef MT_OPTIM_KERNELS

}  // namespace mantissa::cpu

// Optimizer and clipping kernels over raw pointers. The element updates are optim/update_math.h's, the
// functions the CUDA kernels call: each loop here only picks the variant (template flags, so the loop has
// no branch inside) and calls the element function, which GCC inlines and vectorizes. Their float32
// arithmetic follows PyTorch 1.13's single-tensor CPU path op by op, every rounding written out, so it does
// not depend on contraction; the file is still compiled with -ffp-contract=off (CMakeLists.txt), so nothing
// written here as a plain expression is fused either, and with -fno-math-errno so the loops with sqrt
// vectorize.
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
#include "optim/update_math.h"

namespace mantissa::cpu {
namespace {

namespace um = update_math;

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

template <typename T>
T inv_scale_of(const ScalingPointers& s) {
  return s.inv_scale != nullptr ? static_cast<T>(*s.inv_scale) : T(1);
}

// Elements [begin, end) of one SGD update. The flags are compile-time constants, so the branches of
// sgd_element fold away and the loop vectorizes.
template <typename T, um::SgdFlags kFlags>
void sgd_elements(const SgdPointers<T>& t, const um::SgdConstants<T>& c, int64_t begin, int64_t end) {
  T* __restrict p = t.param;
  const T* __restrict g = t.grad;
  T* __restrict buf = t.momentum_buffer;
  for (int64_t i = begin; i < end; ++i) {
    T b = T(0);
    if constexpr (kFlags.use_buffer) b = buf[i];
    p[i] = um::sgd_element(p[i], g[i], b, c, kFlags);
    if constexpr (kFlags.momentum) buf[i] = b;
  }
}

// Elements [begin, end) of one Adam update; a plain function (no captures) so GCC vectorizes it.
template <typename T, um::AdamFlags kFlags>
void adam_elements(const AdamPointers<T>& t, const um::AdamConstants<T>& c, int64_t begin, int64_t end) {
  T* __restrict p = t.param;
  const T* __restrict g = t.grad;
  T* __restrict m = t.exp_avg;
  T* __restrict v = t.exp_avg_sq;
  T* __restrict vmax = t.max_exp_avg_sq;
  for (int64_t i = begin; i < end; ++i) {
    T mi = m[i], vi = v[i], xi = T(0);
    if constexpr (kFlags.amsgrad) xi = vmax[i];
    p[i] = um::adam_element(p[i], g[i], mi, vi, xi, c, kFlags);
    m[i] = mi;
    v[i] = vi;
    if constexpr (kFlags.amsgrad) vmax[i] = xi;
  }
}

// Elements [begin, end) of one Lion update.
template <typename T, um::LionFlags kFlags>
void lion_elements(const LionPointers<T>& t, const um::LionConstants<T>& c, int64_t begin, int64_t end) {
  T* __restrict p = t.param;
  const T* __restrict g = t.grad;
  T* __restrict m = t.exp_avg;
  for (int64_t i = begin; i < end; ++i) {
    T mi = m[i];
    p[i] = um::lion_element(p[i], g[i], mi, c, kFlags);
    m[i] = mi;
  }
}

}  // namespace

template <typename T>
void sgd_step(const SgdPointers<T>& t, const SGDOptions& o, ScalingPointers s) {
  if (skipped(s)) return;
  const bool first = *t.step == 0;
  *t.step += 1;
  const auto c = um::sgd_constants<T>(o.lr, o.momentum, o.dampening, o.weight_decay, inv_scale_of<T>(s));
  const bool momentum = o.momentum != 0.0;
  with_flag(s.inv_scale != nullptr, [&](auto scaled) {
    with_flag(o.weight_decay != 0.0, [&](auto decay) {
      with_flag(momentum && !first, [&](auto use_buffer) {
        with_flag(momentum && o.nesterov, [&](auto nesterov) {
          parallel_for(t.n, kGrain, [&](int64_t begin, int64_t end) {
            update_range(t.param, t.copy, begin, end, [&](int64_t b, int64_t e) {
              if (momentum) {
                sgd_elements<T, um::SgdFlags{scaled(), decay(), true, use_buffer(), nesterov()}>(t, c, b, e);
              } else {
                sgd_elements<T, um::SgdFlags{scaled(), decay(), false, false, false}>(t, c, b, e);
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
  const auto c = um::adam_constants<T>(o.lr, o.betas[0], o.betas[1], o.eps, o.weight_decay, inv_scale_of<T>(s),
                                       um::adam_step_values(o.lr, o.betas[0], o.betas[1], step));
  // AdamW multiplies by (1 - lr * 0) = 1 when weight_decay is 0: skipping it gives the same values.
  const bool l2 = mode == WeightDecay::kL2 && o.weight_decay != 0.0;
  const bool decoupled = mode == WeightDecay::kDecoupled && o.weight_decay != 0.0;
  with_flag(s.inv_scale != nullptr, [&](auto scaled) {
    with_flag(o.amsgrad, [&](auto amsgrad) {
      with_flag(l2, [&](auto use_l2) {
        with_flag(decoupled, [&](auto use_decoupled) {
          parallel_for(t.n, kGrain, [&](int64_t begin, int64_t end) {
            update_range(t.param, t.copy, begin, end, [&](int64_t b, int64_t e) {
              adam_elements<T, um::AdamFlags{scaled(), amsgrad(), use_l2(), use_decoupled()}>(t, c, b, e);
            });
          });
        });
      });
    });
  });
}

template <typename T>
void lion_step(const LionPointers<T>& t, const LionOptions& o, ScalingPointers s) {
  if (skipped(s)) return;
  *t.step += 1;  // Lion has no bias correction; the count is kept as every optimizer's is
  const auto c = um::lion_constants<T>(o.lr, o.betas[0], o.betas[1], o.weight_decay, inv_scale_of<T>(s));
  with_flag(s.inv_scale != nullptr, [&](auto scaled) {
    with_flag(o.weight_decay != 0.0, [&](auto decay) {  // a multiplication by 1 when weight_decay is 0
      parallel_for(t.n, kGrain, [&](int64_t begin, int64_t end) {
        update_range(t.param, t.copy, begin, end, [&](int64_t b, int64_t e) {
          lion_elements<T, um::LionFlags{scaled(), decay()}>(t, c, b, e);
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
  template void lion_step<T>(const LionPointers<T>&, const LionOptions&, ScalingPointers);              \
  template void norm_partials<T>(const T*, int64_t, NormPartial, double*);                              \
  template void scale<T>(T*, int64_t, double);                                                          \
  template void clamp_abs<T>(T*, int64_t, double);
MT_OPTIM_KERNELS(float)
MT_OPTIM_KERNELS(double)
#undef MT_OPTIM_KERNELS

}  // namespace mantissa::cpu

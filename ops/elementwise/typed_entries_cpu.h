// Typed entries for elementwise ops: check devices and dtypes, pick the output dtype and shape, and
// run a functor over every element with ops/cpu/loops.h. Each is one profiler event named by its op, with
// its operands and result (framework/profiler/profiler.h). The functor gets compute-type values (float
// for f16/bf16, double for f64) and returns the compute-type result.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "framework/convert.h"
#include "framework/parallel.h"
#include "framework/profiler/profiler.h"
#include "framework/tensor.h"
#include "ops/cpu/loops.h"

namespace mantissa {

namespace detail {
inline void check_same_device(std::string_view op, const Tensor& a, const Tensor& b) {
  MT_CHECK(a.device() == b.device(), op, ": tensors are on different devices: ", a.device().str(), " and ",
           b.device().str(), ". HINT: move both to one device first");
  MT_CHECK(a.device().is_cpu(), op, ": no kernel for ", a.device().str(), " in this build");
}
inline Tensor as_dtype(const Tensor& t, DType d) { return t.dtype() == d ? t : t.to(d); }
inline void note_operands(profiler::RecordScope& scope, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) scope.add_input(*t);
}

// z = f(a, b) for an f32 operand and an f16/bf16 one of the same shape, both contiguous (autocast's f32
// residual stream plus a 16-bit branch output): the 16-bit operand is widened a block at a time inside the
// loop (exactly, as its cast would), not cast to a tensor of its own first. False (nothing done) for any
// other case.
template <typename F>
bool mixed_f32_binary(const Tensor& a, const Tensor& b, const Tensor& out, F& f) {
  const auto is16 = [](DType d) { return d == DType::kF16 || d == DType::kBF16; };
  if (out.dtype() != DType::kF32 || a.shape() != b.shape() || is16(a.dtype()) == is16(b.dtype()) ||
      !a.is_contiguous() || !b.is_contiguous()) {
    return false;
  }
  const bool a_is16 = is16(a.dtype());
  const Tensor& wide = a_is16 ? b : a;
  const Tensor& narrow = a_is16 ? a : b;
  const auto run = [&]<typename H>() {
    const float* w = wide.data<float>();
    const H* h = narrow.data<H>();
    float* o = out.data<float>();
    parallel_for(out.numel(), 32768, [&](int64_t begin, int64_t end) {
      constexpr int64_t kBlock = 512;
      float buf[kBlock];
      for (int64_t i = begin; i < end; i += kBlock) {
        const int64_t m = std::min(kBlock, end - i);
        convert(h + i, buf, m);
        if (a_is16) {
          for (int64_t j = 0; j < m; ++j) o[i + j] = f(buf[j], w[i + j]);
        } else {
          for (int64_t j = 0; j < m; ++j) o[i + j] = f(w[i + j], buf[j]);
        }
      }
    });
  };
  if (narrow.dtype() == DType::kF16) {
    run.template operator()<Half>();
  } else {
    run.template operator()<BFloat16>();
  }
  return true;
}
}  // namespace detail

// y = f(x), same dtype as x (floating).
template <typename F>
Tensor map_unary(const Tensor& x, std::string_view op, F&& f) {
  profiler::RecordScope scope(op);
  detail::check_same_device(op, x, x);
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (scope.active()) detail::note_operands(scope, {&x, &out});
  dispatch_floating(x.dtype(), op, [&]<typename T>() { cpu::elementwise_loop<T, T, 1>(out, {&x}, f); });
  return out;
}

// z = f(a, b) with broadcasting; both are converted to their promoted floating dtype.
template <typename F>
Tensor map_binary(const Tensor& a, const Tensor& b, std::string_view op, F&& f) {
  profiler::RecordScope scope(op);
  detail::check_same_device(op, a, b);
  const DType dt = promote_types(a.dtype(), b.dtype());
  MT_CHECK(is_floating(dt), op, ": expected floating tensors, got ", dtype_name(a.dtype()), " and ",
           dtype_name(b.dtype()));
  Tensor out = empty(cpu::broadcast_shapes(a.shape(), b.shape(), op), {.dtype = dt, .device = a.device()});
  if (detail::mixed_f32_binary(a, b, out, f)) {
    if (scope.active()) detail::note_operands(scope, {&a, &b, &out});
    return out;
  }
  const Tensor a2 = detail::as_dtype(a, dt), b2 = detail::as_dtype(b, dt);
  if (scope.active()) detail::note_operands(scope, {&a2, &b2, &out});
  dispatch_floating(dt, op, [&]<typename T>() { cpu::elementwise_loop<T, T, 2>(out, {&a2, &b2}, f); });
  return out;
}

// w = f(a, b, c) with broadcasting over all three, in their promoted floating dtype.
template <typename F>
Tensor map_ternary(const Tensor& a, const Tensor& b, const Tensor& c, std::string_view op, F&& f) {
  profiler::RecordScope scope(op);
  detail::check_same_device(op, a, b);
  detail::check_same_device(op, a, c);
  const DType dt = promote_types(promote_types(a.dtype(), b.dtype()), c.dtype());
  MT_CHECK(is_floating(dt), op, ": expected floating tensors, got ", dtype_name(a.dtype()), ", ", dtype_name(b.dtype()),
           " and ", dtype_name(c.dtype()));
  const Tensor a2 = detail::as_dtype(a, dt), b2 = detail::as_dtype(b, dt), c2 = detail::as_dtype(c, dt);
  const Shape shape = cpu::broadcast_shapes(cpu::broadcast_shapes(a.shape(), b.shape(), op), c.shape(), op);
  Tensor out = empty(shape, {.dtype = dt, .device = a.device()});
  if (scope.active()) detail::note_operands(scope, {&a2, &b2, &c2, &out});
  dispatch_floating(dt, op, [&]<typename T>() { cpu::elementwise_loop<T, T, 3>(out, {&a2, &b2, &c2}, f); });
  return out;
}

// bool = f(a, b) with broadcasting, compared in the promoted dtype (any dtype).
template <typename F>
Tensor map_compare(const Tensor& a, const Tensor& b, std::string_view op, F&& f) {
  profiler::RecordScope scope(op);
  detail::check_same_device(op, a, b);
  const DType dt = promote_types(a.dtype(), b.dtype());
  const Tensor a2 = detail::as_dtype(a, dt), b2 = detail::as_dtype(b, dt);
  Tensor out = empty(cpu::broadcast_shapes(a.shape(), b.shape(), op), {.dtype = DType::kBool, .device = a.device()});
  if (scope.active()) detail::note_operands(scope, {&a2, &b2, &out});
  dispatch_all(dt, op, [&]<typename T>() { cpu::elementwise_loop<bool, T, 2>(out, {&a2, &b2}, f); });
  return out;
}

}  // namespace mantissa

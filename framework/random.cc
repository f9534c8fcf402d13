// rand, randn, uniform_ and normal_: one draw per element, in row-major order, from the Generator's
// stream (uniform: one 32-bit word per f32/f16/bf16 element, two per f64; normal: four words).
#include "framework/random.h"

#include <bit>
#include <cmath>
#include <limits>

#include "framework/autograd.h"

namespace mantissa {
namespace {

Generator& generator_or_default(Generator* g) { return g != nullptr ? *g : default_generator(); }

void check_fill_target(const Tensor& t, std::string_view op) {
  MT_CHECK(t.defined(), op, ": the tensor is undefined");
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor (f32, f64, f16, bf16), got ", shape_str(t.shape()),
           " ", dtype_name(t.dtype()), ". HINT: fill a floating tensor and convert with to()");
  MT_CHECK(t.device().is_cpu(), op, ": random fills run on the CPU; the tensor is on ", t.device().str(),
           ". HINT: fill a CPU tensor and copy it over");
  MT_CHECK(t.is_leaf() || !t.requires_grad() || !GradMode::is_enabled(), op,
           ": cannot overwrite a tensor that was computed by a differentiable op (", shape_str(t.shape()), " ",
           dtype_name(t.dtype()),
           "); its graph would no longer match its values. HINT: fill it under NoGradGuard "
           "or fill a detach()ed copy");
  for (int64_t d = 0; d < t.dim(); ++d) {
    MT_CHECK(t.stride(d) != 0 || t.size(d) <= 1, op, ": the tensor ", shape_str(t.shape()), " with strides ",
             shape_str(t.strides()),
             " has several elements in one memory location (an expand()ed view), so "
             "they cannot get independent values. HINT: call contiguous() or clone() first");
  }
}

// Stores draw() into every element of `t` in row-major order: directly when contiguous, else through a
// contiguous buffer, so that the values never depend on the strides.
template <typename T, typename Draw>
void fill_row_major(const Tensor& t, Draw&& draw) {
  const Tensor dst = t.is_contiguous() ? t : empty(t.shape(), {.dtype = t.dtype()});
  T* p = static_cast<T*>(dst.data_ptr());
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = draw();
  if (!dst.is_same(t)) copy_(t, dst);
}

// The next representable T below x (x finite). 16-bit types step through their sign-magnitude bits.
template <typename T>
T step_down(T x) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return std::nextafter(x, -std::numeric_limits<T>::infinity());
  } else {
    const uint16_t b = x.bits;
    if ((b & 0x7fffu) == 0) return T::from_bits(0x8001u);  // +-0 -> the smallest negative subnormal
    return T::from_bits(static_cast<uint16_t>((b & 0x8000u) ? b + 1 : b - 1));
  }
}

// The largest T strictly below `high`: where a value that rounded up to `high` is put back.
template <typename T>
T largest_below(double high) {
  T x = static_cast<T>(static_cast<compute_t<T>>(high));
  while (static_cast<double>(static_cast<compute_t<T>>(x)) >= high) x = step_down(x);
  return x;
}

}  // namespace

void uniform_(const Tensor& t, double low, double high, Generator* generator) {
  check_fill_target(t, "uniform_");
  MT_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, "uniform_: expected finite low <= high, got [",
           low, ", ", high, ")");
  Generator& gen = generator_or_default(generator);
  dispatch_floating(t.dtype(), "uniform_", [&]<typename T>() {
    using C = compute_t<T>;  // f64 draws in double; f32, f16 and bf16 in float
    const C lo = static_cast<C>(low);
    const C range = static_cast<C>(high) - lo;
    MT_CHECK(std::isfinite(range), "uniform_: the range [", low, ", ", high, ") overflows ", dtype_name(dtype_v<C>));
    // low + range * u can round up to high (in C, or when rounding to a 16-bit T): such a value is
    // replaced by the largest T below high, so the interval stays half-open.
    const T below_high = high > low ? largest_below<T>(high) : static_cast<T>(lo);
    fill_row_major<T>(t, [&] {
      C u;
      if constexpr (std::is_same_v<C, double>) {
        u = gen.uniform_double();
      } else {
        u = gen.uniform_float();
      }
      const T v = static_cast<T>(lo + range * u);
      return high > low && static_cast<double>(static_cast<C>(v)) >= high ? below_high : v;
    });
  });
}

void normal_(const Tensor& t, double mean, double stddev, Generator* generator) {
  check_fill_target(t, "normal_");
  MT_CHECK(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0, "normal_: expected a finite mean and ",
           "stddev >= 0, got mean ", mean, ", stddev ", stddev);
  Generator& gen = generator_or_default(generator);
  dispatch_floating(t.dtype(), "normal_", [&]<typename T>() {
    using C = compute_t<T>;
    const C m = static_cast<C>(mean), s = static_cast<C>(stddev);
    // One rounding to T at the end: mean + stddev * z is computed in C (f32 for the 16-bit types).
    fill_row_major<T>(t, [&] { return static_cast<T>(m + s * static_cast<C>(gen.normal())); });
  });
}

Tensor rand(const Shape& shape, TensorOptions options, Generator* generator) {
  MT_CHECK(is_floating(options.dtype), "rand: expected a floating dtype, got ", dtype_name(options.dtype));
  const bool requires_grad = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(shape, options);
  uniform_(t, 0.0, 1.0, generator);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* generator) {
  MT_CHECK(is_floating(options.dtype), "randn: expected a floating dtype, got ", dtype_name(options.dtype));
  const bool requires_grad = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(shape, options);
  normal_(t, 0.0, 1.0, generator);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

}  // namespace mantissa

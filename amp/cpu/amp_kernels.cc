// Non-finite checks on the bits, so the loops vectorize; found_inf is written only when something is
// found (a relaxed store of 1: any thread may set it, none resets it).
#include "amp/cpu/amp_kernels.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <type_traits>

#include "framework/parallel.h"

namespace mantissa::cpu {
namespace {

constexpr int64_t kGrain = int64_t{1} << 15;  // elements per thread worth a fork for a streaming pass

// Non-finite test on the bits (exponent all ones), an integer op the loops below vectorize.
template <typename T>
using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
template <typename T>
constexpr Bits<T> kExponentMask = sizeof(T) == 4 ? Bits<T>(0x7f800000u) : Bits<T>(0x7ff0000000000000ull);

}  // namespace

template <typename T>
void check_finite(const T* g, int64_t n, float* found_inf) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    const T* __restrict x = g;
    Bits<T> exponent = 0;  // the largest exponent field seen: all ones iff an inf or nan was seen
    for (int64_t i = begin; i < end; ++i)
      exponent = std::max(exponent, std::bit_cast<Bits<T>>(x[i]) & kExponentMask<T>);
    if (exponent == kExponentMask<T>) std::atomic_ref<float>(*found_inf).store(1.0f, std::memory_order_relaxed);
  });
}

template <typename T>
void unscale_and_check(T* g, int64_t n, const float* inv_scale, float* found_inf) {
  const T inv = static_cast<T>(*inv_scale);
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    T* __restrict x = g;
    Bits<T> exponent = 0;
    for (int64_t i = begin; i < end; ++i) {
      exponent = std::max(exponent, std::bit_cast<Bits<T>>(x[i]) & kExponentMask<T>);
      x[i] = x[i] * inv;
    }
    if (exponent == kExponentMask<T>) std::atomic_ref<float>(*found_inf).store(1.0f, std::memory_order_relaxed);
  });
}

template void check_finite<float>(const float*, int64_t, float*);
template void check_finite<double>(const double*, int64_t, float*);
template void unscale_and_check<float>(float*, int64_t, const float*, float*);
template void unscale_and_check<double>(double*, int64_t, const float*, float*);

}  // namespace mantissa::cpu

// The per-element math of the CUDA copy kernels as __host__ __device__ functions, so CPU tests run the very
// code the GPU runs: f16/bf16 conversions (round to nearest even, the bits of framework/half.h, NaN payloads
// kept), the dtype casts of copy_ (the CPU's cast rules), and the strided offset calculator (up to 8 dims).
// No CUDA headers: g++ compiles it for the tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "framework/float8.h"
#include "framework/half.h"
#include "framework/host_device.h"

namespace mantissa::gpu {

// Storage types of the 16-bit and 8-bit floats in kernels: the same bits as mantissa::Half / BFloat16 /
// Float8E4M3 / Float8E5M2.
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};
struct F8E4M3 {
  uint8_t bits;
};
struct F8E5M2 {
  uint8_t bits;
};

// A CPU scalar type's storage tag in kernels (Half -> F16, ...; every other type is itself), whose widen/narrow
// below are the CPU's conversions bit for bit.
template <typename T>
struct storage_tag {
  using type = T;
};
template <>
struct storage_tag<Half> {
  using type = F16;
};
template <>
struct storage_tag<BFloat16> {
  using type = BF16;
};
template <>
struct storage_tag<Float8E4M3> {
  using type = F8E4M3;
};
template <>
struct storage_tag<Float8E5M2> {
  using type = F8E5M2;
};
template <typename T>
using storage_t = typename storage_tag<T>::type;

MT_HD inline uint32_t float_to_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

MT_HD inline float bits_to_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// float -> binary16, round to nearest even; overflow gives inf; a nan stays a quiet nan with its payload.
MT_HD inline uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {
    return static_cast<uint16_t>(abs == 0x7f800000u ? sign | 0x7c00u : sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to 65520 or more
  if (abs < 0x38800000u) {                                               // f16 subnormal range
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);           // under half the smallest: 0
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - (abs >> 23);  // 14..24
    const uint32_t kept = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    return static_cast<uint16_t>(sign | (kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u)));
  }
  // Normal: rebias the exponent (127 -> 15), round away 13 bits to even; a carry bumps the exponent.
  const uint32_t r = abs - 0x38000000u;
  const uint32_t kept = r >> 13;
  const uint32_t rest = r & 0x1fffu;
  return static_cast<uint16_t>(sign | (kept + ((rest > 0x1000u || (rest == 0x1000u && (kept & 1u))) ? 1u : 0u)));
}

MT_HD inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_to_float(sign | 0x7f800000u | (mant != 0 ? 0x400000u | (mant << 13) : 0u));
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;  // mant * 2^-24, exact
    return sign != 0 ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float -> bfloat16: the top 16 bits rounded to nearest even; a nan stays a quiet nan.
MT_HD inline uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

MT_HD inline float bf16_bits_to_f32(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

// A value in its compute type: f16/bf16/FP8 widen to float, everything else is itself.
template <typename T>
MT_HD inline auto widen(T v) {
  if constexpr (std::is_same_v<T, F16>) {
    return f16_bits_to_f32(v.bits);
  } else if constexpr (std::is_same_v<T, BF16>) {
    return bf16_bits_to_f32(v.bits);
  } else if constexpr (std::is_same_v<T, F8E4M3>) {
    return bits_to_float(Fp8E4M3Format::to_f32_bits(v.bits));
  } else if constexpr (std::is_same_v<T, F8E5M2>) {
    return bits_to_float(Fp8E5M2Format::to_f32_bits(v.bits));
  } else {
    return v;
  }
}

// A compute value stored as T, rounded once (f16/bf16/FP8 from float with round to nearest even; FP8 with
// PyTorch's overflow rule per format, framework/float8.h).
template <typename T, typename C>
MT_HD inline T narrow(C v) {
  if constexpr (std::is_same_v<T, F16>) {
    return F16{f32_to_f16_bits(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<T, BF16>) {
    return BF16{f32_to_bf16_bits(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<T, F8E4M3>) {
    return F8E4M3{Fp8E4M3Format::from_f32_bits(float_to_bits(static_cast<float>(v)), Float8E4M3::kDefaultOverflow)};
  } else if constexpr (std::is_same_v<T, F8E5M2>) {
    return F8E5M2{Fp8E5M2Format::from_f32_bits(float_to_bits(static_cast<float>(v)), Float8E5M2::kDefaultOverflow)};
  } else {
    return static_cast<T>(v);
  }
}

// copy_'s conversion, as the CPU does it (framework/copy.cc): through the source's compute type; to bool
// is "!= 0"; to f16/bf16 goes through float (f64 and i64 round to float first, as PyTorch does).
template <typename To, typename From>
MT_HD inline To cast_element(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    using C = decltype(widen(v));
    return widen(v) != C(0);
  } else {
    return narrow<To>(widen(v));
  }
}

// dst += src in the compute type, rounded once.
template <typename T>
MT_HD inline T add_element(T a, T b) {
  return narrow<T>(widen(a) + widen(b));
}

inline constexpr int kMaxDims = 8;

// Element offsets of N operands that share one (coalesced) shape, from a linear index in row-major order.
template <int N>
struct StridedOffsets {
  int ndim = 1;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  MT_HD void get(int64_t linear, int64_t (&out)[N]) const {
    for (int k = 0; k < N; ++k) out[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
      for (int k = 0; k < N; ++k) out[k] += i * strides[k][d];
    }
  }
  // One dim of stride 1 for every operand: offsets equal the linear index.
  MT_HD bool contiguous() const {
    if (ndim != 1) return false;
    for (int k = 0; k < N; ++k) {
      if (strides[k][0] != 1) return false;
    }
    return true;
  }
};

// Launch geometry of the elementwise kernels: 256 threads, one element per thread, and at most 65535 blocks
// (the loops are grid-stride, so a larger n takes several rounds).
inline constexpr int kCopyThreads = 256;
inline constexpr int64_t kMaxCopyBlocks = 65535;
inline constexpr int64_t copy_blocks(int64_t n) {
  const int64_t b = (n + kCopyThreads - 1) / kCopyThreads;
  return b < 1 ? 1 : (b > kMaxCopyBlocks ? kMaxCopyBlocks : b);
}

}  // namespace mantissa::gpu

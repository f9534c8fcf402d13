// DType: the element types a Tensor can hold, their sizes and names, and the dispatch helpers that
// turn a runtime DType into a C++ type for kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "framework/error.h"
#include "framework/half.h"

namespace mantissa {

enum class DType : uint8_t { kF32, kF64, kF16, kBF16, kI64, kI32, kBool };

inline constexpr DType kFloat32 = DType::kF32;
inline constexpr DType kFloat64 = DType::kF64;
inline constexpr DType kFloat16 = DType::kF16;
inline constexpr DType kBFloat16 = DType::kBF16;
inline constexpr DType kInt64 = DType::kI64;
inline constexpr DType kInt32 = DType::kI32;
inline constexpr DType kBool = DType::kBool;

constexpr std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kBool: return "bool";
  }
  return "?";
}

constexpr size_t element_size(DType d) {
  switch (d) {
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kBool: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kF16 || d == DType::kBF16;
}
constexpr bool is_low_precision(DType d) { return d == DType::kF16 || d == DType::kBF16; }

// Type promotion for binary ops, as PyTorch does for tensors of equal category: the wider floating
// type wins; f16 with bf16 gives f32; floating beats integer; i64 beats i32 beats bool.
constexpr DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType d) {
    switch (d) {
      case DType::kBool: return 0;
      case DType::kI32: return 1;
      case DType::kI64: return 2;
      case DType::kF16:
      case DType::kBF16: return 3;
      case DType::kF32: return 4;
      case DType::kF64: return 5;
    }
    return 0;
  };
  if (is_low_precision(a) && is_low_precision(b)) return DType::kF32;
  return rank(a) >= rank(b) ? a : b;
}

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::kF16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::kBool;
};
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// The type a kernel computes in: 16-bit floats compute in float and round once at the output.
template <typename T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<Half> {
  using type = float;
};
template <>
struct compute_type<BFloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename compute_type<T>::type;

// Dispatch: call f.template operator()<T>() with the C++ type of `d`. `op` names the caller for the
// error when `d` is not one of the allowed types.
#define MT_DISPATCH_CASE_(E, T) \
  case DType::E: return f.template operator()<T>()

template <typename F>
decltype(auto) dispatch_floating(DType d, std::string_view op, F&& f) {
  switch (d) {
    MT_DISPATCH_CASE_(kF32, float);
    MT_DISPATCH_CASE_(kF64, double);
    MT_DISPATCH_CASE_(kF16, Half);
    MT_DISPATCH_CASE_(kBF16, BFloat16);
    default: break;
  }
  MT_THROW(op, ": expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(d));
}

template <typename F>
decltype(auto) dispatch_all(DType d, std::string_view op, F&& f) {
  switch (d) {
    MT_DISPATCH_CASE_(kF32, float);
    MT_DISPATCH_CASE_(kF64, double);
    MT_DISPATCH_CASE_(kF16, Half);
    MT_DISPATCH_CASE_(kBF16, BFloat16);
    MT_DISPATCH_CASE_(kI64, int64_t);
    MT_DISPATCH_CASE_(kI32, int32_t);
    MT_DISPATCH_CASE_(kBool, bool);
  }
  MT_THROW(op, ": unknown dtype");
}

template <typename F>
decltype(auto) dispatch_integral(DType d, std::string_view op, F&& f) {
  switch (d) {
    MT_DISPATCH_CASE_(kI64, int64_t);
    MT_DISPATCH_CASE_(kI32, int32_t);
    default: break;
  }
  MT_THROW(op, ": expected an integer dtype (i64, i32), got ", dtype_name(d));
}

#undef MT_DISPATCH_CASE_

}  // namespace mantissa

// DType: the element types a Tensor can hold, their sizes and names, and the dispatch helpers that
// turn a runtime DType into a C++ type for kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "framework/error.h"
#include "framework/float8.h"
#include "framework/half.h"

namespace mantissa {

// kF8E4M3 and kF8E5M2 are storage types: tensors of them are made by conversion (to, copy_) or by FP8
// quantization (ops/fp8/fp8.h), moved, viewed, saved and fed to the scaled FP8 matmul; arithmetic ops refuse them
// (as PyTorch's float8 dtypes). is_floating() is false for them: it means "computes in this type". kU8 is storage
// too: the codes of 8-bit block-quantized optimizer state (optim/precision_ladder.h), moved, copied and saved, never
// computed with.
enum class DType : uint8_t { kF32, kF64, kF16, kBF16, kI64, kI32, kBool, kF8E4M3, kF8E5M2, kU8 };

inline constexpr DType kFloat32 = DType::kF32;
inline constexpr DType kFloat64 = DType::kF64;
inline constexpr DType kFloat16 = DType::kF16;
inline constexpr DType kBFloat16 = DType::kBF16;
inline constexpr DType kInt64 = DType::kI64;
inline constexpr DType kInt32 = DType::kI32;
inline constexpr DType kBool = DType::kBool;
inline constexpr DType kFloat8E4M3 = DType::kF8E4M3;
inline constexpr DType kFloat8E5M2 = DType::kF8E5M2;
inline constexpr DType kUInt8 = DType::kU8;

constexpr std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kBool: return "bool";
    case DType::kF8E4M3: return "f8e4m3";
    case DType::kF8E5M2: return "f8e5m2";
    case DType::kU8: return "u8";
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
    case DType::kBool:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kU8: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kF16 || d == DType::kBF16;
}
constexpr bool is_low_precision(DType d) { return d == DType::kF16 || d == DType::kBF16; }
constexpr bool is_float8(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; }

// Type promotion for binary ops, as PyTorch does for tensors of equal category: the wider floating
// type wins; f16 with bf16 gives f32; floating beats integer; i64 beats i32 beats bool. The FP8 types promote
// with nothing (PyTorch refuses too): convert them first.
constexpr DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_float8(a) || is_float8(b)) {
    MT_THROW("type promotion: ", dtype_name(a), " with ", dtype_name(b),
             " is not defined for FP8 types. HINT: convert the FP8 tensor with .to(kF32) (or dequantize it) first");
  }
  auto rank = [](DType d) {
    switch (d) {
      case DType::kBool: return 0;
      case DType::kI32: return 1;
      case DType::kI64: return 2;
      case DType::kF16:
      case DType::kBF16: return 3;
      case DType::kF32: return 4;
      case DType::kF64: return 5;
      case DType::kU8: return 0;  // storage: with anything wider, the wider type
      case DType::kF8E4M3:
      case DType::kF8E5M2: break;  // refused above
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
struct dtype_of<Float8E4M3> {
  static constexpr DType value = DType::kF8E4M3;
};
template <>
struct dtype_of<Float8E5M2> {
  static constexpr DType value = DType::kF8E5M2;
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
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::kU8;
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
template <>
struct compute_type<Float8E4M3> {
  using type = float;
};
template <>
struct compute_type<Float8E5M2> {
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

// The error of an op that has no FP8 kernel.
[[noreturn]] inline void throw_no_float8_kernel(DType d, std::string_view op) {
  MT_THROW(op, ": no kernel for ", dtype_name(d),
           " tensors (FP8 tensors are storage for the scaled FP8 matmul: they can be converted, copied, viewed "
           "and saved). HINT: convert with .to(kF32) first");
}

// Every arithmetic type: the FP8 storage types are refused with throw_no_float8_kernel.
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
    case DType::kF8E4M3:
    case DType::kF8E5M2: throw_no_float8_kernel(d, op);
    case DType::kU8:
      MT_THROW(op, ": no kernel for u8 tensors (they hold 8-bit optimizer state codes: they can be copied, viewed ",
               "and saved). HINT: dequantize them through the optimizer, or convert with .to(kI32)");
  }
  MT_THROW(op, ": unknown dtype");
}

// Every dtype, FP8 included: for the kernels that only move or convert elements (copy_, fill_, item,
// index_select, printing).
template <typename F>
decltype(auto) dispatch_with_float8(DType d, std::string_view op, F&& f) {
  switch (d) {
    MT_DISPATCH_CASE_(kF8E4M3, Float8E4M3);
    MT_DISPATCH_CASE_(kF8E5M2, Float8E5M2);
    MT_DISPATCH_CASE_(kU8, uint8_t);
    default: return dispatch_all(d, op, std::forward<F>(f));
  }
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

// Moving values between a storage type T and its compute type compute_t<T> (float for f16/bf16):
// widening is exact; narrowing is the one rounding a 16-bit op makes at its output.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "framework/convert.h"
#include "framework/dtype.h"

namespace mantissa::cpu {

template <typename T>
void to_compute(const T* src, compute_t<T>* dst, int64_t n) {
  if constexpr (std::is_same_v<T, compute_t<T>>) {
    std::copy(src, src + n, dst);
  } else {
    convert(src, dst, n);
  }
}

template <typename T>
void from_compute(const compute_t<T>* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, compute_t<T>>) {
    std::copy(src, src + n, dst);
  } else {
    convert(src, dst, n);
  }
}

// `src` read in the compute type: the pointer itself when T already is it, else a widened copy kept
// in `storage`.
template <typename T>
const compute_t<T>* compute_view(const T* src, int64_t n, std::vector<compute_t<T>>& storage) {
  if constexpr (std::is_same_v<T, compute_t<T>>) {
    return src;
  } else {
    storage.resize(static_cast<size_t>(n));
    convert(src, storage.data(), n);
    return storage.data();
  }
}

}  // namespace mantissa::cpu

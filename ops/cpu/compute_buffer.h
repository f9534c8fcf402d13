// Moving values between a storage type T and its compute type compute_t<T> (float for f16/bf16):
// widening is exact; narrowing is the one rounding a 16-bit op makes at its output.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "framework/allocator.h"
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

// A buffer of `count` C from the caching allocator (no page faults in a steady-state loop), not zeroed.
template <typename C>
class CachedBuffer {
 public:
  explicit CachedBuffer(int64_t count)
      : bytes_(static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(C)),
        ptr_(static_cast<C*>(cpu_allocator()->allocate(bytes_))) {}
  ~CachedBuffer() { cpu_allocator()->deallocate(ptr_, bytes_); }
  CachedBuffer(const CachedBuffer&) = delete;
  CachedBuffer& operator=(const CachedBuffer&) = delete;
  C* get() const { return ptr_; }

 private:
  size_t bytes_;
  C* ptr_;
};

// A per-thread buffer of at least `count` values, kept between calls (no allocation or zeroing per call).
// Each kernel file names its buffers with a tag type of its own and a slot per buffer live at once.
template <typename C, typename Tag, int kSlot>
C* thread_scratch(int64_t count) {
  thread_local std::vector<C> buffer;
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(static_cast<size_t>(count));
  return buffer.data();
}

}  // namespace mantissa::cpu

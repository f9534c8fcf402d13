// fill_, copy_ (strided, converting dtypes) and accumulate_ (dst += src), the kernels the framework
// layer itself needs: contiguous(), to(), factories and the autograd engine's gradient sums. The CPU
// kernels are here; the CUDA ones (framework/cuda/transfer.h) are named in the same DeviceKernels tables.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "framework/autograd.h"
#include "framework/convert.h"
#include "framework/cuda/transfer.h"
#include "framework/device_kernels.h"
#include "framework/strided.h"
#include "framework/tensor.h"

namespace mantissa {
namespace {

template <typename To, typename From>
inline To cast_value(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<compute_t<From>>(v) != compute_t<From>(0);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16> || std::is_same_v<To, Float8E4M3> ||
                       std::is_same_v<To, Float8E5M2>) {
    // double -> float -> half would round twice; PyTorch converts f64 -> f16 (and -> FP8) through float as well.
    return To(static_cast<float>(static_cast<compute_t<From>>(v)));
  } else {
    return static_cast<To>(static_cast<compute_t<From>>(v));
  }
}

// The dtype pairs convert() handles in bulk.
template <typename D, typename S>
inline constexpr bool kBulkConvertible = (std::is_same_v<S, float> &&
                                          (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>)) ||
                                         (std::is_same_v<D, float> &&
                                          (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>));

void check_cpu(const Tensor& t, std::string_view op) {
  MT_CHECK(t.device().is_cpu(), op, ": the CPU kernel got a tensor on ", t.device().str());
}

// Every element of dst = the element_size(dtype)-byte pattern in the low bytes of `bits`.
void cpu_fill(const Tensor& dst, uint64_t bits) {
  check_cpu(dst, "fill_");
  dispatch_with_float8(dst.dtype(), "fill_", [&]<typename T>() {
    T v{};
    std::memcpy(static_cast<void*>(&v), &bits, sizeof(T));  // T is trivially copyable: its bytes are its value
    T* base = dst.data<T>();
    std::array<const Shape*, 1> st{&dst.strides()};
    strided_for_each<1>(dst.shape(), st, [&](int64_t n, auto off, auto s) {
      T* p = base + off[0];
      if (s[0] == 1) {
        std::fill_n(p, n, v);  // unit stride: a loop the compiler vectorizes
        return;
      }
      for (int64_t i = 0; i < n; ++i) p[i * s[0]] = v;
    });
  });
}

void cpu_copy(const Tensor& dst, const Tensor& src) {
  check_cpu(dst, "copy_");
  check_cpu(src, "copy_");
  const int64_t n = dst.numel();
  if (n == 0) return;
  const bool contiguous = dst.is_contiguous() && src.is_contiguous();
  // Contiguous fast paths: same dtype is a memcpy; f32 <-> f16/bf16 uses the vectorized converters.
  if (contiguous && dst.dtype() == src.dtype()) {
    std::memmove(dst.data_ptr(), src.data_ptr(), dst.nbytes());
    return;
  }
  if (contiguous && src.dtype() == DType::kF32 && dst.dtype() == DType::kF16) {
    return convert(src.data<float>(), dst.data<Half>(), n);
  }
  if (contiguous && src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16) {
    return convert(src.data<float>(), dst.data<BFloat16>(), n);
  }
  if (contiguous && src.dtype() == DType::kF16 && dst.dtype() == DType::kF32) {
    return convert(src.data<Half>(), dst.data<float>(), n);
  }
  if (contiguous && src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32) {
    return convert(src.data<BFloat16>(), dst.data<float>(), n);
  }
  dispatch_with_float8(dst.dtype(), "copy_", [&]<typename D>() {
    dispatch_with_float8(src.dtype(), "copy_", [&]<typename S>() {
      D* d = dst.data<D>();
      const S* s = src.data<S>();
      std::array<const Shape*, 2> st{&dst.strides(), &src.strides()};
      strided_for_each<2>(dst.shape(), st, [&](int64_t len, auto off, auto str) {
        D* dp = d + off[0];
        const S* sp = s + off[1];
        if constexpr (std::is_same_v<D, S>) {
          if (str[0] == 1 && str[1] == 1) {  // contiguous rows of a strided view (e.g. a head split)
            std::memcpy(dp, sp, static_cast<size_t>(len) * sizeof(D));
            return;
          }
        } else if constexpr (kBulkConvertible<D, S>) {
          if (str[0] == 1 && str[1] == 1) {  // f32 <-> f16/bf16 rows: the vectorized converters
            convert(sp, dp, len);
            return;
          }
        }
        for (int64_t i = 0; i < len; ++i) dp[i * str[0]] = cast_value<D>(sp[i * str[1]]);
      });
    });
  });
}

void cpu_accumulate(const Tensor& dst, const Tensor& src) {
  check_cpu(dst, "accumulate_");
  dispatch_floating(dst.dtype(), "accumulate_", [&]<typename T>() {
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    std::array<const Shape*, 2> st{&dst.strides(), &src.strides()};
    strided_for_each<2>(dst.shape(), st, [&](int64_t len, auto off, auto str) {
      T* dp = d + off[0];
      const T* sp = s + off[1];
      if constexpr (!std::is_same_v<T, compute_t<T>>) {
        if (str[0] == 1 && str[1] == 1) {
          // 16-bit: widen blocks with the bulk converters, add in f32, round once (the same bits).
          constexpr int64_t kBlock = 256;
          float a[kBlock], b[kBlock];
          for (int64_t i = 0; i < len; i += kBlock) {
            const int64_t m = std::min(kBlock, len - i);
            convert(dp + i, a, m);
            convert(sp + i, b, m);
            for (int64_t j = 0; j < m; ++j) a[j] += b[j];
            convert(a, dp + i, m);
          }
          return;
        }
      }
      if (str[0] == 1 && str[1] == 1) {
        for (int64_t i = 0; i < len; ++i) {
          dp[i] = static_cast<T>(static_cast<compute_t<T>>(dp[i]) + static_cast<compute_t<T>>(sp[i]));
        }
      } else {
        for (int64_t i = 0; i < len; ++i) {
          T& x = dp[i * str[0]];
          x = static_cast<T>(static_cast<compute_t<T>>(x) + static_cast<compute_t<T>>(sp[i * str[1]]));
        }
      }
    });
  });
}

constexpr DeviceKernels<decltype(cpu_fill)> kFill{.cpu = &cpu_fill, .cuda = MT_CUDA_KERNEL(gpu::fill_cuda)};
constexpr DeviceKernels<decltype(cpu_copy)> kCopy{.cpu = &cpu_copy, .cuda = MT_CUDA_KERNEL(gpu::copy_cuda)};
constexpr DeviceKernels<decltype(cpu_accumulate)> kAccumulate{.cpu = &cpu_accumulate,
                                                              .cuda = MT_CUDA_KERNEL(gpu::accumulate_cuda)};

// The device whose kernel runs: a GPU's when either tensor is on one (the CUDA copy handles every pair).
Device kernel_device(const Tensor& dst, const Tensor& src) {
  return src.device().is_cuda() ? src.device() : dst.device();
}

}  // namespace

void fill_(const Tensor& dst, double value) {
  // The value converted on the host, as its dtype stores it, for every device: the GPU stores the same bytes.
  uint64_t bits = 0;
  dispatch_with_float8(dst.dtype(), "fill_", [&]<typename T>() {
    const T v = cast_value<T>(value);
    std::memcpy(&bits, &v, sizeof(T));
  });
  dispatch("fill_", kFill, dst.device(), dst, bits);
}

void copy_(const Tensor& dst, const Tensor& src) {
  MT_CHECK(dst.shape() == src.shape(), "copy_: shapes differ: destination ", shape_str(dst.shape()), ", source ",
           shape_str(src.shape()));
  dispatch("copy_", kCopy, kernel_device(dst, src), dst, src);
}

void accumulate_(const Tensor& dst, const Tensor& src) {
  MT_CHECK(dst.shape() == src.shape(), "accumulate_: shapes differ: ", shape_str(dst.shape()),
           " += ", shape_str(src.shape()));
  MT_CHECK(dst.dtype() == src.dtype(), "accumulate_: dtypes differ: ", dtype_name(dst.dtype()),
           " += ", dtype_name(src.dtype()));
  dispatch("accumulate_", kAccumulate, kernel_device(dst, src), dst, src);
}

}  // namespace mantissa

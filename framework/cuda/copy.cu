// CUDA kernels of copy_ (with dtype casts), fill_ and accumulate_: one element per thread, grid-stride,
// a contiguous variant and a strided one (up to 8 coalesced dims). The math is in copy_math.h.
#include "framework/cuda/check.h"
#include "framework/cuda/copy_kernels.h"

namespace mantissa::gpu {
namespace {

template <typename D, typename S, bool kContiguous>
__global__ void copy_kernel(D* dst, const S* src, StridedOffsets<2> geom, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (kContiguous) {
      dst[i] = cast_element<D>(src[i]);
    } else {
      int64_t off[2];
      geom.get(i, off);
      dst[off[0]] = cast_element<D>(src[off[1]]);
    }
  }
}

template <typename U>
__global__ void fill_kernel(U* dst, U value, StridedOffsets<1> geom, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[1] = {i};
    if (!geom.contiguous()) geom.get(i, off);
    dst[off[0]] = value;
  }
}

template <typename T>
__global__ void accumulate_kernel(T* dst, const T* src, StridedOffsets<2> geom, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const bool contiguous = geom.contiguous();
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[2] = {i, i};
    if (!contiguous) geom.get(i, off);
    if constexpr (std::is_same_v<T, int64_t>) {
      dst[off[0]] += src[off[1]];  // counters (batch norm's num_batches_tracked)
    } else {
      dst[off[0]] = add_element(dst[off[0]], src[off[1]]);
    }
  }
}

// Calls f(T{}) with the kernel storage type of `dtype`.
template <typename F>
void with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF64: return f(double{});
    case DType::kF16: return f(F16{});
    case DType::kBF16: return f(BF16{});
    case DType::kI64: return f(int64_t{});
    case DType::kI32: return f(int32_t{});
    case DType::kBool: return f(bool{});
    case DType::kU8: return f(uint8_t{});
    case DType::kF8E4M3: return f(F8E4M3{});
    case DType::kF8E5M2: return f(F8E5M2{});
  }
  MT_THROW("CUDA copy: unknown dtype ", static_cast<int>(dtype));
}

unsigned grid(int64_t n) { return static_cast<unsigned>(copy_blocks(n)); }

}  // namespace

void launch_copy(void* dst, DType dst_dtype, const void* src, DType src_dtype, const StridedOffsets<2>& geom, int64_t n,
                 cudaStream_t stream) {
  if (n == 0) return;
  with_type(dst_dtype, [&](auto d_tag) {
    with_type(src_dtype, [&](auto s_tag) {
      using D = decltype(d_tag);
      using S = decltype(s_tag);
      auto* d = static_cast<D*>(dst);
      const auto* s = static_cast<const S*>(src);
      if (geom.contiguous()) {
        copy_kernel<D, S, true><<<grid(n), kCopyThreads, 0, stream>>>(d, s, geom, n);
      } else {
        copy_kernel<D, S, false><<<grid(n), kCopyThreads, 0, stream>>>(d, s, geom, n);
      }
    });
  });
  MT_CUDA_CHECK(cudaGetLastError());
}

void launch_fill(void* dst, size_t element_size, uint64_t bits, const StridedOffsets<1>& geom, int64_t n,
                 cudaStream_t stream) {
  if (n == 0) return;
  switch (element_size) {
    case 1:
      fill_kernel<<<grid(n), kCopyThreads, 0, stream>>>(static_cast<uint8_t*>(dst), static_cast<uint8_t>(bits), geom,
                                                        n);
      break;
    case 2:
      fill_kernel<<<grid(n), kCopyThreads, 0, stream>>>(static_cast<uint16_t*>(dst), static_cast<uint16_t>(bits), geom,
                                                        n);
      break;
    case 4:
      fill_kernel<<<grid(n), kCopyThreads, 0, stream>>>(static_cast<uint32_t*>(dst), static_cast<uint32_t>(bits), geom,
                                                        n);
      break;
    case 8: fill_kernel<<<grid(n), kCopyThreads, 0, stream>>>(static_cast<uint64_t*>(dst), bits, geom, n); break;
    default: MT_THROW("CUDA fill_: unsupported element size ", element_size);
  }
  MT_CUDA_CHECK(cudaGetLastError());
}

void launch_accumulate(void* dst, const void* src, DType dtype, const StridedOffsets<2>& geom, int64_t n,
                       cudaStream_t stream) {
  if (n == 0) return;
  MT_CHECK(is_floating(dtype) || dtype == DType::kI64,
           "accumulate_: CUDA kernel for floating dtypes and i64 only, got ", dtype_name(dtype));
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, F16> ||
                  std::is_same_v<T, BF16> || std::is_same_v<T, int64_t>) {
      accumulate_kernel<<<grid(n), kCopyThreads, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src), geom,
                                                              n);
    }
  });
  MT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mantissa::gpu

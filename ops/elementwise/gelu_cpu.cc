// GELU (erf form) kernels: f32 block loops built twice (the AVX2 baseline and AVX-512, picked once from
// the CPU), threaded over contiguous chunks. Elementwise with explicit fmas, so both builds give the
// same bits (tests/ops/elementwise_test.cc compares them).
#include "ops/elementwise/gelu_cpu.h"

#include <algorithm>
#include <type_traits>

#include "framework/convert.h"
#include "framework/parallel.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/vec_math.h"
#include "ops/pointwise_math.h"

namespace mantissa::cpu {
namespace {

using ForwardBlock = void (*)(const float*, float*, int64_t);
using BackwardBlock = void (*)(const float*, const float*, float*, int64_t);

#define MT_GELU_BLOCKS_(SUFFIX, ATTR)                                                                           \
  ATTR void forward_block_##SUFFIX(const float* __restrict x, float* __restrict y, int64_t n) {                 \
    for (int64_t i = 0; i < n; ++i) y[i] = pointwise::gelu<VecMath>(x[i]);                                      \
  }                                                                                                             \
  ATTR void backward_block_##SUFFIX(const float* __restrict g, const float* __restrict x, float* __restrict dx, \
                                    int64_t n) {                                                                \
    for (int64_t i = 0; i < n; ++i) dx[i] = pointwise::gelu_backward<VecMath>(g[i], x[i]);                      \
  }
MT_GELU_BLOCKS_(avx2, )
MT_GELU_BLOCKS_(avx512, __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))))
#undef MT_GELU_BLOCKS_

constexpr int64_t kGrain = 32768;  // as the elementwise loops: below this a second thread costs more
constexpr int64_t kBlock = 512;    // 16-bit: widened block size (fits L1 with its output)

}  // namespace

template <typename T>
void gelu_erf_forward(const T* x, T* y, int64_t n) {
  const ForwardBlock block = has_avx512_block_isa() ? forward_block_avx512 : forward_block_avx2;
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      block(x + begin, y + begin, end - begin);
    } else {
      float a[kBlock], r[kBlock];
      for (int64_t i = begin; i < end; i += kBlock) {
        const int64_t m = std::min(kBlock, end - i);
        convert(x + i, a, m);
        block(a, r, m);
        convert(r, y + i, m);
      }
    }
  });
}

template <typename T>
void gelu_erf_backward(const T* g, const T* x, T* dx, int64_t n) {
  const BackwardBlock block = has_avx512_block_isa() ? backward_block_avx512 : backward_block_avx2;
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      block(g + begin, x + begin, dx + begin, end - begin);
    } else {
      float a[kBlock], b[kBlock], r[kBlock];
      for (int64_t i = begin; i < end; i += kBlock) {
        const int64_t m = std::min(kBlock, end - i);
        convert(g + i, a, m);
        convert(x + i, b, m);
        block(a, b, r, m);
        convert(r, dx + i, m);
      }
    }
  });
}

// The AVX2 build on its own, for the test that both builds agree.
void gelu_erf_forward_avx2(const float* x, float* y, int64_t n) { forward_block_avx2(x, y, n); }
void gelu_erf_backward_avx2(const float* g, const float* x, float* dx, int64_t n) { backward_block_avx2(g, x, dx, n); }

#define MT_INSTANTIATE_(T)                                  \
  template void gelu_erf_forward<T>(const T*, T*, int64_t); \
  template void gelu_erf_backward<T>(const T*, const T*, T*, int64_t)
MT_INSTANTIATE_(float);
MT_INSTANTIATE_(Half);
MT_INSTANTIATE_(BFloat16);
#undef MT_INSTANTIATE_

}  // namespace mantissa::cpu

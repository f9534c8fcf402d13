// Elementwise loop drivers. map_unary / map_binary / map_ternary allocate a contiguous output and call
// a functor on every element in the compute type (float for f16/bf16, so a 16-bit op computes in fp32
// and rounds once at the store). Inputs may be strided or broadcast; contiguous inputs take a flat,
// vectorizable, multi-threaded loop.
#pragma once

#include <algorithm>
#include <array>
#include <string_view>
#include <type_traits>

#include "framework/convert.h"
#include "framework/parallel.h"
#include "framework/strided.h"
#include "framework/tensor.h"

namespace mantissa::cpu {

inline constexpr int64_t kElementwiseGrain = 32768;  // below this a second thread costs more than it saves

// Broadcast shape of two shapes (numpy rules); `op` names the caller in the error.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);
// Strides that read `t` as if expanded to `shape` (0 where broadcast).
Shape broadcast_strides(const Tensor& t, const Shape& shape);

// The contiguous case over [begin, end). Plain loops over __restrict pointers so the compiler
// vectorizes them (an output is always a fresh tensor, so it never aliases an input). 16-bit inputs
// go through blocks: widen to float with the vectorized converters, compute, narrow once.
template <typename Out, typename In, size_t N, typename F>
void flat_range(Out* o, const std::array<const In*, N>& ip, int64_t begin, int64_t end, F& f) {
  using C = compute_t<In>;
  static_assert(N >= 1 && N <= 3, "flat_range handles 1 to 3 inputs");
  if constexpr (std::is_same_v<In, Out> && !std::is_same_v<In, C>) {
    constexpr int64_t kBlock = 512;
    float a[kBlock], b[kBlock], c[kBlock], r[kBlock];
    for (int64_t i = begin; i < end; i += kBlock) {
      const int64_t n = std::min(kBlock, end - i);
      convert(ip[0] + i, a, n);
      if constexpr (N >= 2) convert(ip[1] + i, b, n);
      if constexpr (N >= 3) convert(ip[2] + i, c, n);
      for (int64_t j = 0; j < n; ++j) {
        if constexpr (N == 1) r[j] = f(a[j]);
        if constexpr (N == 2) r[j] = f(a[j], b[j]);
        if constexpr (N == 3) r[j] = f(a[j], b[j], c[j]);
      }
      convert(r, o + i, n);
    }
  } else {
    Out* __restrict out = o;
    const In* __restrict a = ip[0];
    const In* __restrict b = N >= 2 ? ip[N >= 2 ? 1 : 0] : nullptr;
    const In* __restrict c = N >= 3 ? ip[N >= 3 ? 2 : 0] : nullptr;
    for (int64_t i = begin; i < end; ++i) {
      if constexpr (N == 1) out[i] = static_cast<Out>(f(static_cast<C>(a[i])));
      if constexpr (N == 2) out[i] = static_cast<Out>(f(static_cast<C>(a[i]), static_cast<C>(b[i])));
      if constexpr (N == 3) {
        out[i] = static_cast<Out>(f(static_cast<C>(a[i]), static_cast<C>(b[i]), static_cast<C>(c[i])));
      }
    }
  }
}

// out[i] = f(in0[i], in1[i], ...) with out of dtype Out, inputs read as In (all already of In's dtype).
template <typename Out, typename In, size_t N, typename F>
void elementwise_loop(const Tensor& out, const std::array<const Tensor*, N>& in, F&& f) {
  Out* o = out.data<Out>();
  std::array<const In*, N> ip;
  bool flat = out.is_contiguous();
  for (size_t k = 0; k < N; ++k) {
    ip[k] = in[k]->template data<In>();
    flat = flat && in[k]->is_contiguous() && in[k]->shape() == out.shape();
  }
  using C = compute_t<In>;
  auto apply = [&](auto... v) { return static_cast<Out>(f(static_cast<C>(v)...)); };
  if (flat) {
    parallel_for(out.numel(), kElementwiseGrain,
                 [&](int64_t begin, int64_t end) { flat_range<Out, In, N>(o, ip, begin, end, f); });
    return;
  }
  std::array<Shape, N> bstrides;
  std::array<const Shape*, N + 1> st;
  st[0] = &out.strides();
  for (size_t k = 0; k < N; ++k) {
    bstrides[k] = broadcast_strides(*in[k], out.shape());
    st[k + 1] = &bstrides[k];
  }
  strided_for_each<N + 1>(out.shape(), st, [&](int64_t n, const auto& off, const auto& s) {
    for (int64_t i = 0; i < n; ++i) {
      o[off[0] + i * s[0]] = [&]<size_t... K>(std::index_sequence<K...>) {
        return apply(ip[K][off[K + 1] + i * s[K + 1]]...);
      }
      (std::make_index_sequence<N>{});
    }
  });
}

}  // namespace mantissa::cpu

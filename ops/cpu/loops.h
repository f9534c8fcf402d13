// Elementwise loop drivers. map_unary / map_binary / map_ternary allocate a contiguous output and call
// a functor on every element in the compute type (float for f16/bf16, so a 16-bit op computes in fp32
// and rounds once at the store). Inputs may be strided or broadcast; contiguous inputs take a flat,
// vectorizable, multi-threaded loop.
#pragma once

#include <array>
#include <string_view>
#include <type_traits>

#include "framework/parallel.h"
#include "framework/strided.h"
#include "framework/tensor.h"

namespace mantissa::cpu {

inline constexpr int64_t kElementwiseGrain = 32768;  // below this a second thread costs more than it saves

// Broadcast shape of two shapes (numpy rules); `op` names the caller in the error.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);
// Strides that read `t` as if expanded to `shape` (0 where broadcast).
Shape broadcast_strides(const Tensor& t, const Shape& shape);

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
    parallel_for(out.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        o[i] = [&]<size_t... K>(std::index_sequence<K...>) { return apply(ip[K][i]...); }(
            std::make_index_sequence<N>{});
      }
    });
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
      }(std::make_index_sequence<N>{});
    }
  });
}

}  // namespace mantissa::cpu

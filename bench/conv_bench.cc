// conv2d speed on a CNN-sized layer: N=64, 32 -> 64 channels, 28x28, 3x3, padding 1 (1.85 GFLOP per
// forward). mantissa's im2col + GEMM path (forward, and forward + backward) in f32 and bf16, beside
// oneDNN's convolution primitive (forward, with the reorders from and to plain NCHW that using it
// from mantissa would need), which is how the choice in ops/conv/conv.cc was measured.
#include <benchmark/benchmark.h>

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "ops/conv/conv.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

constexpr int64_t kN = 64, kC = 32, kO = 64, kHW = 28, kK = 3;
constexpr double kForwardFlops = 2.0 * kN * kO * kHW * kHW * kC * kK * kK;

Tensor filled(const Shape& shape, DType dtype, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& e : v) e = static_cast<float>(gen.normal()) * 0.1f;
  return from_vector<float>(v, shape).to(dtype);
}

void set_flops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iter * static_cast<double>(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

void BM_Conv2dForward(benchmark::State& state, DType dtype) {
  const Tensor x = filled({kN, kC, kHW, kHW}, dtype, 1), w = filled({kO, kC, kK, kK}, dtype, 2),
               b = filled({kO}, dtype, 3);
  NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(conv2d(x, w, b, {.padding = {1, 1}}).data_ptr());
  set_flops(state, kForwardFlops);
}

void BM_Conv2dForwardBackward(benchmark::State& state, DType dtype) {
  Tensor x = filled({kN, kC, kHW, kHW}, dtype, 1).set_requires_grad(true);
  Tensor w = filled({kO, kC, kK, kK}, dtype, 2).set_requires_grad(true);
  Tensor b = filled({kO}, dtype, 3).set_requires_grad(true);
  const Tensor g = filled({kN, kO, kHW, kHW}, dtype, 4);
  for (auto _ : state) {
    conv2d(x, w, b, {.padding = {1, 1}}).backward(g);
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  set_flops(state, 3 * kForwardFlops);  // forward, input grad, weight grad
}

// oneDNN forward: primitive with layouts of its choosing, plus reorders of src, weights, dst.
void BM_OneDnnConv2dForward(benchmark::State& state, dnnl::memory::data_type dt) {
  using namespace dnnl;
  using tag = memory::format_tag;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const memory::dims src_dims{kN, kC, kHW, kHW}, w_dims{kO, kC, kK, kK}, b_dims{kO}, dst_dims{kN, kO, kHW, kHW};
  auto conv_desc = convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                             memory::desc(src_dims, dt, tag::any), memory::desc(w_dims, dt, tag::any),
                                             memory::desc(b_dims, memory::data_type::f32, tag::a),
                                             memory::desc(dst_dims, dt, tag::any), {1, 1}, {1, 1}, {1, 1});
  convolution_forward::primitive_desc pd(conv_desc, eng);
  memory src_plain({src_dims, dt, tag::nchw}, eng), w_plain({w_dims, dt, tag::oihw}, eng),
      dst_plain({dst_dims, dt, tag::nchw}, eng), bias({b_dims, memory::data_type::f32, tag::a}, eng);
  memory src(pd.src_desc(), eng), w(pd.weights_desc(), eng), dst(pd.dst_desc(), eng);
  std::memset(src_plain.get_data_handle(), 0, src_plain.get_desc().get_size());
  std::memset(w_plain.get_data_handle(), 0, w_plain.get_desc().get_size());
  std::memset(bias.get_data_handle(), 0, bias.get_desc().get_size());
  convolution_forward conv(pd);
  reorder to_src(src_plain, src), to_w(w_plain, w), from_dst(dst, dst_plain);
  for (auto _ : state) {
    to_src.execute(s, src_plain, src);
    to_w.execute(s, w_plain, w);
    conv.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, dst}});
    from_dst.execute(s, dst, dst_plain);
    s.wait();
  }
  set_flops(state, kForwardFlops);
  state.SetLabel(pd.impl_info_str());
}

BENCHMARK_CAPTURE(BM_Conv2dForward, f32, kFloat32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Conv2dForward, bf16, kBFloat16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Conv2dForwardBackward, f32, kFloat32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Conv2dForwardBackward, bf16, kBFloat16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_OneDnnConv2dForward, f32, dnnl::memory::data_type::f32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_OneDnnConv2dForward, bf16, dnnl::memory::data_type::bf16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();

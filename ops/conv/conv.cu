// conv2d through cuDNN (ops/conv/conv_launch.h). A plan per (device, dtype, math, direction, geometry) holds
// the tensor, filter and convolution descriptors and the algorithm cuDNN's v7 heuristics rank first
// among those that fit the workspace limit and keep the dtype's contract (ops/conv/conv_plan.h). Plans
// are built once, never changed, and shared by all threads. The bias is broadcast into y first
// (cudnnAddTensor with beta 0) and the convolution accumulates onto it (beta 1), so a 16-bit output is
// rounded once, as on the CPU.
#include <climits>
#include <cudnn.h>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "framework/dtype.h"
#include "ops/conv/conv_cuda.h"
#include "ops/conv/conv_launch.h"
#include "ops/conv/conv_plan.h"
#include "ops/cuda/device_types.cuh"
#include "ops/cuda/library_check.h"
#include "ops/cuda/library_handles.h"
#include "ops/matmul/tf32.h"

namespace mantissa::gpu {
namespace {

// Largest workspace an algorithm may ask for; a faster one that needs more is passed over.
constexpr size_t kConvWorkspaceLimit = size_t{1} << 30;

template <typename T>
constexpr cudnnDataType_t data_type() {
  if constexpr (std::is_same_v<T, double>) return CUDNN_DATA_DOUBLE;
  if constexpr (std::is_same_v<T, Half>) return CUDNN_DATA_HALF;
  if constexpr (std::is_same_v<T, BFloat16>) return CUDNN_DATA_BFLOAT16;
  return CUDNN_DATA_FLOAT;
}
// Scaling factors are double for double data and float otherwise (cuDNN's rule).
template <typename T>
using Scale = std::conditional_t<std::is_same_v<T, double>, double, float>;

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;
  size_t workspace = 0;
  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

int to_int(int64_t v, const char* what, const cpu::Conv2dGeometry& g) {
  MT_CHECK(v <= INT_MAX, "conv2d: ", what, " ", v, " exceeds cuDNN's 32-bit limit (input [", g.n, ", ", g.c, ", ", g.h,
           ", ", g.w, "], ", g.o, " output channels). HINT: split the batch");
  return static_cast<int>(v);
}

cudnnTensorDescriptor_t tensor_desc(cudnnDataType_t dt, int64_t n, int64_t c, int64_t h, int64_t w,
                                    const cpu::Conv2dGeometry& g) {
  to_int(n * c * h * w, "tensor size", g);
  cudnnTensorDescriptor_t d = nullptr;
  MT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
  MT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, dt, static_cast<int>(n), static_cast<int>(c),
                                            static_cast<int>(h), static_cast<int>(w)));
  return d;
}

ConvMathType mirror(cudnnMathType_t m) { return static_cast<ConvMathType>(static_cast<int>(m)); }

// The math type the descriptor starts with before the heuristic query (PyTorch's choice): FMA for exact
// f32, default (TF32 allowed) for TF32, tensor ops for 16-bit, default for f64.
cudnnMathType_t initial_math(DType dtype, ConvMath math) {
  if (dtype == DType::kF32) return math == ConvMath::kTf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  if (is_low_precision(dtype)) return CUDNN_TENSOR_OP_MATH;
  return CUDNN_DEFAULT_MATH;
}

// Converts one direction's perf list and picks; the limit is lifted once if nothing fits.
template <typename Perf>
const Perf& choose(const std::vector<Perf>& perf, const ConvKey& key) {
  std::vector<ConvCandidate> candidates;
  for (const Perf& p : perf) {
    candidates.push_back({.algo = static_cast<int>(p.algo),
                          .ok = p.status == CUDNN_STATUS_SUCCESS,
                          .workspace = p.memory,
                          .math = mirror(p.mathType)});
  }
  int i = pick_conv_candidate(candidates, key.dtype, key.math, kConvWorkspaceLimit);
  if (i < 0) i = pick_conv_candidate(candidates, key.dtype, key.math, SIZE_MAX);
  const cpu::Conv2dGeometry& g = key.geometry;
  MT_CHECK(i >= 0, "conv2d: cuDNN offers no algorithm for ", dtype_name(key.dtype), " input [", g.n, ", ", g.c, ", ",
           g.h, ", ", g.w, "], weight [", g.o, ", ", g.c_per_group(), ", ", g.kh, ", ", g.kw, "], groups ", g.groups,
           " (direction ", static_cast<int>(key.direction), ", ", candidates.size(), " candidates)");
  return perf[static_cast<size_t>(i)];
}

template <typename T>
std::unique_ptr<ConvPlan> build_plan(const ConvKey& key, cudnnHandle_t handle) {
  constexpr cudnnDataType_t dt = data_type<T>();
  constexpr cudnnDataType_t compute = std::is_same_v<T, double> ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cpu::Conv2dGeometry& g = key.geometry;
  auto plan = std::make_unique<ConvPlan>();
  plan->x = tensor_desc(dt, g.n, g.c, g.h, g.w, g);
  plan->y = tensor_desc(dt, g.n, g.o, g.oh, g.ow, g);
  plan->bias = tensor_desc(dt, 1, g.o, 1, 1, g);
  to_int(g.o * g.c_per_group() * g.kh * g.kw, "weight size", g);  // as tensor_desc checks x and y
  MT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan->w));
  MT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w, dt, CUDNN_TENSOR_NCHW, to_int(g.o, "channels", g),
                                            to_int(g.c_per_group(), "channels", g), to_int(g.kh, "kernel", g),
                                            to_int(g.kw, "kernel", g)));
  MT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&plan->conv));
  MT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan->conv, to_int(g.pad_h, "padding", g),
                                                 to_int(g.pad_w, "padding", g), to_int(g.stride_h, "stride", g),
                                                 to_int(g.stride_w, "stride", g), to_int(g.dil_h, "dilation", g),
                                                 to_int(g.dil_w, "dilation", g), CUDNN_CROSS_CORRELATION, compute));
  MT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan->conv, to_int(g.groups, "groups", g)));
  MT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, initial_math(key.dtype, key.math)));

  int returned = 0;
  switch (key.direction) {
    case ConvDirection::kForward: {
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
      MT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, plan->x, plan->w, plan->conv, plan->y,
                                                            static_cast<int>(perf.size()), &returned, perf.data()));
      perf.resize(static_cast<size_t>(returned));
      const auto& best = choose(perf, key);
      MT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, best.mathType));
      MT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle, plan->x, plan->w, plan->conv, plan->y, best.algo,
                                                             &plan->workspace));
      plan->algo = static_cast<int>(best.algo);
      break;
    }
    case ConvDirection::kBackwardData: {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
      MT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          handle, plan->w, plan->y, plan->conv, plan->x, static_cast<int>(perf.size()), &returned, perf.data()));
      perf.resize(static_cast<size_t>(returned));
      const auto& best = choose(perf, key);
      MT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, best.mathType));
      MT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle, plan->w, plan->y, plan->conv, plan->x,
                                                                  best.algo, &plan->workspace));
      plan->algo = static_cast<int>(best.algo);
      break;
    }
    case ConvDirection::kBackwardFilter: {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
      MT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          handle, plan->x, plan->y, plan->conv, plan->w, static_cast<int>(perf.size()), &returned, perf.data()));
      perf.resize(static_cast<size_t>(returned));
      const auto& best = choose(perf, key);
      MT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, best.mathType));
      MT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, plan->x, plan->y, plan->conv, plan->w,
                                                                    best.algo, &plan->workspace));
      plan->algo = static_cast<int>(best.algo);
      break;
    }
  }
  return plan;
}

struct PlanCache {
  std::mutex mu;
  std::unordered_map<ConvKey, std::shared_ptr<const ConvPlan>, ConvKeyHash> plans;
  ConvStats stats;
};
PlanCache& plan_cache() {
  static PlanCache* const cache = new PlanCache;  // leaked: descriptors outlive static destruction
  return *cache;
}

// The plan for this call, built on first use. The caller holds a DeviceGuard for `device`.
template <typename T>
std::shared_ptr<const ConvPlan> plan_for(const cpu::Conv2dGeometry& g, ConvDirection direction, int device,
                                         cudnnHandle_t handle) {
  const ConvKey key{
      .device = device,
      .dtype = dtype_v<T>,
      .math = std::is_same_v<T, float> && cuda_conv_tf32() == Tf32::kOn ? ConvMath::kTf32 : ConvMath::kExact,
      .direction = direction,
      .geometry = g};
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  auto it = cache.plans.find(key);
  if (it != cache.plans.end()) {
    ++cache.stats.plan_hits;
    return it->second;
  }
  std::shared_ptr<const ConvPlan> plan = build_plan<T>(key, handle);
  cache.plans.emplace(key, plan);
  ++cache.stats.plans_built;
  return plan;
}

// This thread's cuDNN handle for `device`, bound to `stream`.
cudnnHandle_t handle_on(int device, cudaStream_t stream) {
  cudnnHandle_t h = cudnn_handle(device);
  MT_CUDNN_CHECK(cudnnSetStream(h, stream));
  return h;
}

}  // namespace

template <typename T>
void conv2d_forward(const cpu::Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y, int device,
                    cudaStream_t stream) {
  if (g.n == 0) return;
  DeviceGuard guard(device);
  cudnnHandle_t h = handle_on(device, stream);
  const std::shared_ptr<const ConvPlan> plan = plan_for<T>(g, ConvDirection::kForward, device, h);
  const Scale<T> one = 1, zero = 0;
  if (bias != nullptr) MT_CUDNN_CHECK(cudnnAddTensor(h, &one, plan->bias, bias, &zero, plan->y, y));
  const Workspace ws = stream_workspace(device, stream, plan->workspace);  // held until enqueued
  MT_CUDNN_CHECK(cudnnConvolutionForward(h, &one, plan->x, x, plan->w, w, plan->conv,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(plan->algo), ws.data(), plan->workspace,
                                         bias != nullptr ? &one : &zero, plan->y, y));
}

template <typename T>
void conv2d_backward_data(const cpu::Conv2dGeometry& g, const T* dy, const T* w, T* dx, int device,
                          cudaStream_t stream) {
  if (g.n == 0) return;
  DeviceGuard guard(device);
  cudnnHandle_t h = handle_on(device, stream);
  const std::shared_ptr<const ConvPlan> plan = plan_for<T>(g, ConvDirection::kBackwardData, device, h);
  const Scale<T> one = 1, zero = 0;
  const Workspace ws = stream_workspace(device, stream, plan->workspace);  // held until enqueued
  MT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, plan->w, w, plan->y, dy, plan->conv,
                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(plan->algo), ws.data(),
                                              plan->workspace, &zero, plan->x, dx));
}

template <typename T>
void conv2d_backward_filter(const cpu::Conv2dGeometry& g, const T* x, const T* dy, T* dw, int device,
                            cudaStream_t stream) {
  DeviceGuard guard(device);
  if (g.n == 0) {  // the empty sum; all-zero bits are +0 in every floating type
    MT_CUDA_CHECK(cudaMemsetAsync(dw, 0, static_cast<size_t>(g.o * g.col_rows()) * sizeof(T), stream));
    return;
  }
  cudnnHandle_t h = handle_on(device, stream);
  const std::shared_ptr<const ConvPlan> plan = plan_for<T>(g, ConvDirection::kBackwardFilter, device, h);
  const Scale<T> one = 1, zero = 0;
  const Workspace ws = stream_workspace(device, stream, plan->workspace);  // held until enqueued
  MT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, plan->x, x, plan->y, dy, plan->conv,
                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan->algo), ws.data(),
                                                plan->workspace, &zero, plan->w, dw));
}

// db[o] = the sum of dy[n, o, p] over the samples n and output pixels p: one block per channel, the sum in
// the compute type (f32; f64 for double) in an order fixed by the geometry, rounded once. Not cuDNN's
// cudnnConvolutionBackwardBias: cuDNN 9.19 answered CUDNN_STATUS_NOT_SUPPORTED for bf16 on the first GPU
// run (an H200, bench/gpu/2026-11-28), and a plain column sum is all it is.
template <typename D>
__global__ void conv_bias_grad_kernel(const D* dy, int64_t n, int64_t channels, int64_t plane, D* db) {
  using A = compute_t<D>;
  __shared__ A scratch[32];
  const int64_t o = blockIdx.x;
  A sum = 0;
  for (int64_t i = threadIdx.x; i < n * plane; i += blockDim.x) {
    const int64_t sample = i / plane, p = i % plane;
    sum += load(dy[(sample * channels + o) * plane + p]);
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) db[o] = store<D>(sum);
}

template <typename T>
void conv2d_backward_bias(const cpu::Conv2dGeometry& g, const T* dy, T* db, int device, cudaStream_t stream) {
  DeviceGuard guard(device);
  if (g.o == 0) return;
  // n == 0: each block's sum is empty and stores +0.
  conv_bias_grad_kernel<<<static_cast<unsigned>(g.o), 256, 0, stream>>>(dev(dy), g.n, g.o, g.out_plane(), dev(db));
  MT_CUDA_LAUNCH_CHECK("conv_bias_grad_kernel");
}

ConvStats conv_stats() {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  return cache.stats;
}

#define MT_CONV_INSTANTIATE(T)                                                                                      \
  template void conv2d_forward<T>(const cpu::Conv2dGeometry&, const T*, const T*, const T*, T*, int, cudaStream_t); \
  template void conv2d_backward_data<T>(const cpu::Conv2dGeometry&, const T*, const T*, T*, int, cudaStream_t);     \
  template void conv2d_backward_filter<T>(const cpu::Conv2dGeometry&, const T*, const T*, T*, int, cudaStream_t);   \
  template void conv2d_backward_bias<T>(const cpu::Conv2dGeometry&, const T*, T*, int, cudaStream_t);
MT_CONV_INSTANTIATE(float)
MT_CONV_INSTANTIATE(double)
MT_CONV_INSTANTIATE(Half)
MT_CONV_INSTANTIATE(BFloat16)
#undef MT_CONV_INSTANTIATE

}  // namespace mantissa::gpu

// Typed entries (the tensors' side of the launchers above), the CUDA side of ops/conv/conv.cc.
namespace mantissa {

void cuda_conv2d(const cpu::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& out) {
  const int d = x.device().index;
  dispatch_floating(x.dtype(), "conv2d", [&]<typename T>() {
    gpu::conv2d_forward<T>(g, x.data<T>(), w.data<T>(), b.defined() ? b.data<T>() : nullptr, out.data<T>(), d,
                           gpu::current_stream(d));
  });
}

void cuda_conv2d_backward(const cpu::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                          const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const int d = dy.device().index;
  const cudaStream_t stream = gpu::current_stream(d);
  dispatch_floating(dy.dtype(), "conv2d_backward", [&]<typename T>() {
    if (dx.defined()) gpu::conv2d_backward_data<T>(g, dy.data<T>(), w.data<T>(), dx.data<T>(), d, stream);
    if (dw.defined()) gpu::conv2d_backward_filter<T>(g, x.data<T>(), dy.data<T>(), dw.data<T>(), d, stream);
    if (db.defined()) gpu::conv2d_backward_bias<T>(g, dy.data<T>(), db.data<T>(), d, stream);
  });
}

}  // namespace mantissa

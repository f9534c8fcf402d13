// The fused multi-tensor SGD, Adam/AdamW and Lion steps. Per group: one small launch advances the step counts
// (unless found_inf), then the multi-tensor launches update parameters, moments and working copies,
// each block reading its parameter's (already advanced) step count. Every kernel returns at once when
// found_inf != 0, so a skipped step changes nothing and the host never reads the flag.
#include "optim/cuda/fused_optim.h"
#include "optim/cuda/multi_tensor_apply.cuh"
#include "optim/update_math.h"

namespace mantissa::gpu {
namespace {

namespace um = update_math;

// ---- step counts ----------------------------------------------------------------------------------------

constexpr int kMaxSteps = 384;  // 3 KiB of pointers per launch
struct StepList {
  int64_t* ptr[kMaxSteps];
  int count;
};

__global__ void bump_steps_kernel(const StepList list, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < list.count) *list.ptr[i] += 1;
}

}  // namespace

void bump_steps(const std::vector<int64_t*>& steps, const float* found_inf, cudaStream_t stream) {
  for (size_t first = 0; first < steps.size(); first += kMaxSteps) {
    StepList list{};
    list.count = static_cast<int>(std::min<size_t>(kMaxSteps, steps.size() - first));
    for (int i = 0; i < list.count; ++i) list.ptr[i] = steps[first + static_cast<size_t>(i)];
    bump_steps_kernel<<<(list.count + 127) / 128, 128, 0, stream>>>(list, found_inf);
    MT_CUDA_LAUNCH_CHECK("bump_steps_kernel");
  }
}

namespace {

// ---- working copies --------------------------------------------------------------------------------------

template <cpu::CopyDType C, int W>
__device__ inline void write_copy(void* copy, int64_t i, const float (&v)[W]) {
  if constexpr (C != cpu::CopyDType::kNone) {
    if (copy == nullptr) return;
    using F = mta::Format<C == cpu::CopyDType::kF16 ? mta::Storage::kF16 : mta::Storage::kBF16>;
    uint16_t out[W];
#pragma unroll
    for (int k = 0; k < W; ++k) out[k] = F::store(v[k]);
    mta::store<W>(static_cast<uint16_t*>(copy), i, out);
  }
}

// The copy dtype of a group's working copies (all the same, or none).
template <typename Pointers>
cpu::CopyDType copy_dtype(std::span<const Pointers> tensors) {
  cpu::CopyDType dtype = cpu::CopyDType::kNone;
  for (const auto& t : tensors) {
    if (t.copy.data == nullptr) continue;
    MT_CHECK(dtype == cpu::CopyDType::kNone || dtype == t.copy.dtype,
             "fused optimizer step: working copies of one group must share one dtype");
    dtype = t.copy.dtype;
  }
  return dtype;
}

template <typename F>
void with_copy_dtype(cpu::CopyDType dtype, F&& f) {
  switch (dtype) {
    case cpu::CopyDType::kNone: return f(std::integral_constant<cpu::CopyDType, cpu::CopyDType::kNone>{});
    case cpu::CopyDType::kF16: return f(std::integral_constant<cpu::CopyDType, cpu::CopyDType::kF16>{});
    case cpu::CopyDType::kBF16: return f(std::integral_constant<cpu::CopyDType, cpu::CopyDType::kBF16>{});
  }
}

// ---- SGD ---------------------------------------------------------------------------------------------------

// Pointer slots of an SGD list.
enum SgdSlot { kSgdParam, kSgdGrad, kSgdBuffer, kSgdCopy, kSgdStep, kSgdDepth };

struct SgdArgs {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  const float* inv_scale;  // null: a plain step
  const float* found_inf;  // null: a plain step
};
static_assert(sizeof(multi_tensor::TensorListMeta<kSgdDepth>) + sizeof(SgdArgs) <= multi_tensor::kKernelParamBytes);

template <cpu::CopyDType C>
__global__ void __launch_bounds__(mta::kThreads)
    sgd_kernel(const multi_tensor::TensorListMeta<kSgdDepth> meta, const SgdArgs a) {
  if (a.found_inf != nullptr && *a.found_inf != 0.0f) return;
  const mta::BlockChunk c = mta::block_chunk(meta);
  float* p = static_cast<float*>(meta.ptr[kSgdParam][c.tensor]);
  const float* g = static_cast<const float*>(meta.ptr[kSgdGrad][c.tensor]);
  float* buf = static_cast<float*>(meta.ptr[kSgdBuffer][c.tensor]);
  void* copy = meta.ptr[kSgdCopy][c.tensor];
  // Advanced by bump_steps before this launch: 1 on the parameter's first step (buf = d, PyTorch's clone).
  const int64_t step = *static_cast<const int64_t*>(meta.ptr[kSgdStep][c.tensor]);
  const bool momentum = a.momentum != 0.0;
  const um::SgdFlags f{.scaled = a.inv_scale != nullptr,
                       .decay = a.weight_decay != 0.0,
                       .momentum = momentum,
                       .use_buffer = momentum && step != 1,
                       .nesterov = momentum && a.nesterov};
  const auto k =
      um::sgd_constants<float>(a.lr, a.momentum, a.dampening, a.weight_decay, f.scaled ? *a.inv_scale : 1.0f);
  const bool vector_ok =
      mta::aligned_to(p, 16) && mta::aligned_to(g, 16) && mta::aligned_to(buf, 16) && mta::aligned_to(copy, 8);
  mta::for_chunk<4>(c.begin, c.end, vector_ok, [&](int64_t i, auto width) {
    constexpr int W = decltype(width)::value;
    float pv[W], gv[W], bv[W] = {};
    mta::load<W>(p, i, pv);
    mta::load<W>(g, i, gv);
    if (f.use_buffer) mta::load<W>(buf, i, bv);
#pragma unroll
    for (int e = 0; e < W; ++e) pv[e] = um::sgd_element(pv[e], gv[e], bv[e], k, f);
    mta::store<W>(p, i, pv);
    if (momentum) mta::store<W>(buf, i, bv);
    write_copy<C, W>(copy, i, pv);
  });
}

// ---- Adam ----------------------------------------------------------------------------------------------------

enum AdamSlot { kAdamParam, kAdamGrad, kAdamExpAvg, kAdamExpAvgSq, kAdamMax, kAdamCopy, kAdamStep, kAdamDepth };

struct AdamArgs {
  double lr, beta1, beta2, eps, weight_decay;
  um::AdamFlags flags;  // flags.scaled: inv_scale is set
  const float* inv_scale;
  const float* found_inf;
};
static_assert(sizeof(multi_tensor::TensorListMeta<kAdamDepth>) + sizeof(AdamArgs) <= multi_tensor::kKernelParamBytes);

template <cpu::CopyDType C>
__global__ void __launch_bounds__(mta::kThreads)
    adam_kernel(const multi_tensor::TensorListMeta<kAdamDepth> meta, const AdamArgs a) {
  if (a.found_inf != nullptr && *a.found_inf != 0.0f) return;  // uniform: every thread returns
  const mta::BlockChunk c = mta::block_chunk(meta);
  float* p = static_cast<float*>(meta.ptr[kAdamParam][c.tensor]);
  const float* g = static_cast<const float*>(meta.ptr[kAdamGrad][c.tensor]);
  float* m = static_cast<float*>(meta.ptr[kAdamExpAvg][c.tensor]);
  float* v = static_cast<float*>(meta.ptr[kAdamExpAvgSq][c.tensor]);
  float* vmax = static_cast<float*>(meta.ptr[kAdamMax][c.tensor]);
  void* copy = meta.ptr[kAdamCopy][c.tensor];
  // The bias corrections from this parameter's step count (advanced before this launch), once per block.
  __shared__ double step_values[2];
  if (threadIdx.x == 0) {
    const auto s =
        um::adam_step_values(a.lr, a.beta1, a.beta2, *static_cast<const int64_t*>(meta.ptr[kAdamStep][c.tensor]));
    step_values[0] = s.bc2_sqrt;
    step_values[1] = s.neg_step_size;
  }
  __syncthreads();
  const auto k =
      um::adam_constants<float>(a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.flags.scaled ? *a.inv_scale : 1.0f,
                                {.bc2_sqrt = step_values[0], .neg_step_size = step_values[1]});
  const um::AdamFlags f = a.flags;
  const bool vector_ok = mta::aligned_to(p, 16) && mta::aligned_to(g, 16) && mta::aligned_to(m, 16) &&
                         mta::aligned_to(v, 16) && mta::aligned_to(vmax, 16) && mta::aligned_to(copy, 8);
  mta::for_chunk<4>(c.begin, c.end, vector_ok, [&](int64_t i, auto width) {
    constexpr int W = decltype(width)::value;
    float pv[W], gv[W], mv[W], vv[W], xv[W] = {};
    mta::load<W>(p, i, pv);
    mta::load<W>(g, i, gv);
    mta::load<W>(m, i, mv);
    mta::load<W>(v, i, vv);
    if (f.amsgrad) mta::load<W>(vmax, i, xv);
#pragma unroll
    for (int e = 0; e < W; ++e) pv[e] = um::adam_element(pv[e], gv[e], mv[e], vv[e], xv[e], k, f);
    mta::store<W>(p, i, pv);
    mta::store<W>(m, i, mv);
    mta::store<W>(v, i, vv);
    if (f.amsgrad) mta::store<W>(vmax, i, xv);
    write_copy<C, W>(copy, i, pv);
  });
}

// ---- Lion ------------------------------------------------------------------------------------------------------

enum LionSlot { kLionParam, kLionGrad, kLionExpAvg, kLionCopy, kLionDepth };

struct LionArgs {
  double lr, beta1, beta2, weight_decay;
  um::LionFlags flags;  // flags.scaled: inv_scale is set
  const float* inv_scale;
  const float* found_inf;
};
static_assert(sizeof(multi_tensor::TensorListMeta<kLionDepth>) + sizeof(LionArgs) <= multi_tensor::kKernelParamBytes);

// Lion needs no step count inside the kernel (no bias correction): bump_steps advances it beforehand.
template <cpu::CopyDType C>
__global__ void __launch_bounds__(mta::kThreads)
    lion_kernel(const multi_tensor::TensorListMeta<kLionDepth> meta, const LionArgs a) {
  if (a.found_inf != nullptr && *a.found_inf != 0.0f) return;
  const mta::BlockChunk c = mta::block_chunk(meta);
  float* p = static_cast<float*>(meta.ptr[kLionParam][c.tensor]);
  const float* g = static_cast<const float*>(meta.ptr[kLionGrad][c.tensor]);
  float* m = static_cast<float*>(meta.ptr[kLionExpAvg][c.tensor]);
  void* copy = meta.ptr[kLionCopy][c.tensor];
  const auto k =
      um::lion_constants<float>(a.lr, a.beta1, a.beta2, a.weight_decay, a.flags.scaled ? *a.inv_scale : 1.0f);
  const um::LionFlags f = a.flags;
  const bool vector_ok =
      mta::aligned_to(p, 16) && mta::aligned_to(g, 16) && mta::aligned_to(m, 16) && mta::aligned_to(copy, 8);
  mta::for_chunk<4>(c.begin, c.end, vector_ok, [&](int64_t i, auto width) {
    constexpr int W = decltype(width)::value;
    float pv[W], gv[W], mv[W];
    mta::load<W>(p, i, pv);
    mta::load<W>(g, i, gv);
    mta::load<W>(m, i, mv);
#pragma unroll
    for (int e = 0; e < W; ++e) pv[e] = um::lion_element(pv[e], gv[e], mv[e], k, f);
    mta::store<W>(p, i, pv);
    mta::store<W>(m, i, mv);
    write_copy<C, W>(copy, i, pv);
  });
}

}  // namespace

void sgd_step(std::span<const cpu::SgdPointers<float>> tensors, const SGDOptions& o, cpu::ScalingPointers scaling,
              cudaStream_t stream) {
  MT_CHECK((scaling.inv_scale == nullptr) == (scaling.found_inf == nullptr),
           "SGD.step (CUDA): inv_scale and found_inf come together");
  if (tensors.empty()) return;
  std::vector<void*> ptrs[kSgdDepth];
  std::vector<int64_t> sizes;
  std::vector<int64_t*> steps;
  for (const auto& t : tensors) {
    MT_CHECK(o.momentum == 0.0 || t.momentum_buffer != nullptr, "SGD.step (CUDA): momentum needs a buffer");
    ptrs[kSgdParam].push_back(t.param);
    ptrs[kSgdGrad].push_back(const_cast<float*>(t.grad));
    ptrs[kSgdBuffer].push_back(o.momentum != 0.0 ? t.momentum_buffer : nullptr);
    ptrs[kSgdCopy].push_back(t.copy.data);
    ptrs[kSgdStep].push_back(t.step);
    sizes.push_back(t.n);
    steps.push_back(t.step);
  }
  bump_steps(steps, scaling.found_inf, stream);
  const SgdArgs args{.lr = o.lr,
                     .momentum = o.momentum,
                     .dampening = o.dampening,
                     .weight_decay = o.weight_decay,
                     .nesterov = o.nesterov,
                     .inv_scale = scaling.inv_scale,
                     .found_inf = scaling.found_inf};
  with_copy_dtype(copy_dtype(tensors), [&](auto dtype) {
    mta::for_each_launch<kSgdDepth>(
        ptrs, sizes, [&](const multi_tensor::TensorListMeta<kSgdDepth>& meta, unsigned blocks) {
          sgd_kernel<decltype(dtype)::value><<<blocks, mta::kThreads, 0, stream>>>(meta, args);
        });
  });
}

void adam_step(std::span<const cpu::AdamPointers<float>> tensors, const AdamOptions& o, cpu::WeightDecay mode,
               cpu::ScalingPointers scaling, cudaStream_t stream) {
  MT_CHECK((scaling.inv_scale == nullptr) == (scaling.found_inf == nullptr),
           "Adam.step (CUDA): inv_scale and found_inf come together");
  if (tensors.empty()) return;
  std::vector<void*> ptrs[kAdamDepth];
  std::vector<int64_t> sizes;
  std::vector<int64_t*> steps;
  for (const auto& t : tensors) {
    MT_CHECK(!o.amsgrad || t.max_exp_avg_sq != nullptr, "Adam.step (CUDA): amsgrad needs max_exp_avg_sq");
    ptrs[kAdamParam].push_back(t.param);
    ptrs[kAdamGrad].push_back(const_cast<float*>(t.grad));
    ptrs[kAdamExpAvg].push_back(t.exp_avg);
    ptrs[kAdamExpAvgSq].push_back(t.exp_avg_sq);
    ptrs[kAdamMax].push_back(o.amsgrad ? t.max_exp_avg_sq : nullptr);
    ptrs[kAdamCopy].push_back(t.copy.data);
    ptrs[kAdamStep].push_back(t.step);
    sizes.push_back(t.n);
    steps.push_back(t.step);
  }
  bump_steps(steps, scaling.found_inf, stream);
  // As the CPU kernel: AdamW's decay is skipped when weight_decay is 0 (a multiplication by 1).
  const AdamArgs args{.lr = o.lr,
                      .beta1 = o.betas[0],
                      .beta2 = o.betas[1],
                      .eps = o.eps,
                      .weight_decay = o.weight_decay,
                      .flags = {.scaled = scaling.inv_scale != nullptr,
                                .amsgrad = o.amsgrad,
                                .l2 = mode == cpu::WeightDecay::kL2 && o.weight_decay != 0.0,
                                .decoupled = mode == cpu::WeightDecay::kDecoupled && o.weight_decay != 0.0},
                      .inv_scale = scaling.inv_scale,
                      .found_inf = scaling.found_inf};
  with_copy_dtype(copy_dtype(tensors), [&](auto dtype) {
    mta::for_each_launch<kAdamDepth>(
        ptrs, sizes, [&](const multi_tensor::TensorListMeta<kAdamDepth>& meta, unsigned blocks) {
          adam_kernel<decltype(dtype)::value><<<blocks, mta::kThreads, 0, stream>>>(meta, args);
        });
  });
}

void lion_step(std::span<const cpu::LionPointers<float>> tensors, const LionOptions& o, cpu::ScalingPointers scaling,
               cudaStream_t stream) {
  MT_CHECK((scaling.inv_scale == nullptr) == (scaling.found_inf == nullptr),
           "Lion.step (CUDA): inv_scale and found_inf come together");
  if (tensors.empty()) return;
  std::vector<void*> ptrs[kLionDepth];
  std::vector<int64_t> sizes;
  std::vector<int64_t*> steps;
  for (const auto& t : tensors) {
    ptrs[kLionParam].push_back(t.param);
    ptrs[kLionGrad].push_back(const_cast<float*>(t.grad));
    ptrs[kLionExpAvg].push_back(t.exp_avg);
    ptrs[kLionCopy].push_back(t.copy.data);
    sizes.push_back(t.n);
    steps.push_back(t.step);
  }
  bump_steps(steps, scaling.found_inf, stream);
  // As the CPU kernel: the decay is skipped when weight_decay is 0 (a multiplication by 1).
  const LionArgs args{.lr = o.lr,
                      .beta1 = o.betas[0],
                      .beta2 = o.betas[1],
                      .weight_decay = o.weight_decay,
                      .flags = {.scaled = scaling.inv_scale != nullptr, .decay = o.weight_decay != 0.0},
                      .inv_scale = scaling.inv_scale,
                      .found_inf = scaling.found_inf};
  with_copy_dtype(copy_dtype(tensors), [&](auto dtype) {
    mta::for_each_launch<kLionDepth>(
        ptrs, sizes, [&](const multi_tensor::TensorListMeta<kLionDepth>& meta, unsigned blocks) {
          lion_kernel<decltype(dtype)::value><<<blocks, mta::kThreads, 0, stream>>>(meta, args);
        });
  });
}

}  // namespace mantissa::gpu

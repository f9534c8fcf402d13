// The grad-scaling kernels: unscale-and-check over many grads per launch, and the loss-scale update.
#include "amp/cuda/amp_kernels.h"
#include "framework/rounding.h"
#include "optim/cuda/multi_tensor_apply.cuh"
#include "optim/update_math.h"  // is_non_finite_bits, the inf/nan test the fused optimizer steps use too

namespace mantissa::gpu {
namespace {

// One chunk of one grad: every thread checks (and scales) its values; any thread that saw an inf or nan
// stores 1 into found_inf (the same value from every writer, so the race is benign).
template <mta::Storage S, GradPass kPass>
__global__ void __launch_bounds__(mta::kThreads)
    unscale_kernel(const multi_tensor::TensorListMeta<1> meta, const float* inv_scale, float* found_inf) {
  using F = mta::Format<S>;
  using Raw = typename F::Raw;
  constexpr int kVec = 16 / sizeof(Raw);
  const mta::BlockChunk c = mta::block_chunk(meta);
  Raw* g = static_cast<Raw*>(meta.ptr[0][c.tensor]);
  const float inv = kPass == GradPass::kUnscale ? *inv_scale : 1.0f;
  bool non_finite = false;
  mta::for_chunk<kVec>(c.begin, c.end, mta::aligned_to(g, 16), [&](int64_t i, auto width) {
    constexpr int W = decltype(width)::value;
    Raw x[W];
    mta::load<W>(g, i, x);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float v = F::load(x[k]);
      non_finite |= update_math::is_non_finite_bits(__float_as_uint(v));
      if constexpr (kPass == GradPass::kUnscale) x[k] = F::store(rn::mul(v, inv));
    }
    if constexpr (kPass == GradPass::kUnscale) mta::store<W>(g, i, x);
  });
  if (non_finite) *found_inf = 1.0f;
}

template <mta::Storage S>
void launch_unscale(std::span<void* const> grads, std::span<const int64_t> sizes, const float* inv_scale,
                    float* found_inf, GradPass pass, cudaStream_t stream) {
  const std::vector<void*> ptrs[1] = {std::vector<void*>(grads.begin(), grads.end())};
  mta::for_each_launch<1>(ptrs, sizes, [&](const multi_tensor::TensorListMeta<1>& meta, unsigned blocks) {
    if (pass == GradPass::kUnscale) {
      unscale_kernel<S, GradPass::kUnscale><<<blocks, mta::kThreads, 0, stream>>>(meta, inv_scale, found_inf);
    } else {
      unscale_kernel<S, GradPass::kCheckOnly><<<blocks, mta::kThreads, 0, stream>>>(meta, inv_scale, found_inf);
    }
  });
}

struct FoundInfList {
  const float* ptr[kMaxFoundInf];
  int count;
};

__global__ void update_scale_kernel(float* scale, float* inv_scale, int64_t* counters, const FoundInfList found,
                                    const amp::loss_scale::Rule rule) {
  bool found_inf = false;
  for (int i = 0; i < found.count; ++i) found_inf = found_inf || *found.ptr[i] != 0.0f;
  float s = *scale, inv = 0.0f;
  amp::loss_scale::apply_rule(s, inv, counters, found_inf, rule);
  *scale = s;
  *inv_scale = inv;
}

}  // namespace

void unscale_and_check(DType dtype, std::span<void* const> grads, std::span<const int64_t> sizes,
                       const float* inv_scale, float* found_inf, GradPass pass, cudaStream_t stream) {
  MT_CHECK(grads.size() == sizes.size(), "unscale_and_check: ", grads.size(), " grads but ", sizes.size(), " sizes");
  MT_CHECK(found_inf != nullptr && (pass == GradPass::kCheckOnly || inv_scale != nullptr),
           "unscale_and_check: found_inf (and inv_scale when unscaling) must be device pointers");
  switch (dtype) {
    case DType::kF32: return launch_unscale<mta::Storage::kF32>(grads, sizes, inv_scale, found_inf, pass, stream);
    case DType::kF16: return launch_unscale<mta::Storage::kF16>(grads, sizes, inv_scale, found_inf, pass, stream);
    case DType::kBF16: return launch_unscale<mta::Storage::kBF16>(grads, sizes, inv_scale, found_inf, pass, stream);
    default:
      MT_THROW("unscale_and_check: grads must be f32, f16 or bf16 on CUDA, got ", dtype_name(dtype),
               ". HINT: f64 training runs on the CPU");
  }
}

void update_loss_scale(float* scale, float* inv_scale, int64_t* counters, std::span<const float* const> found_inf,
                       const amp::loss_scale::Rule& rule, cudaStream_t stream) {
  MT_CHECK(!found_inf.empty() && found_inf.size() <= static_cast<size_t>(kMaxFoundInf),
           "update_loss_scale: between 1 and ", kMaxFoundInf, " found_inf flags, got ", found_inf.size(),
           ". HINT: one GradScaler steps at most ", kMaxFoundInf, " optimizers per iteration on CUDA");
  FoundInfList list{};
  for (size_t i = 0; i < found_inf.size(); ++i) list.ptr[i] = found_inf[i];
  list.count = static_cast<int>(found_inf.size());
  update_scale_kernel<<<1, 1, 0, stream>>>(scale, inv_scale, counters, list, rule);
  MT_CUDA_LAUNCH_CHECK("update_scale_kernel");
}

}  // namespace mantissa::gpu

// The precision ladder's CUDA kernel (optim/cuda/ladder.h). Per group: bump_steps advances the step counts (unless
// found_inf), then multi-tensor launches of one CUDA block per 2048-element block of a parameter. A thread holds 8
// elements in registers from load to store, so the block-wide max that an 8-bit state needs is taken over values the
// block already has; the old absmax is read before the block-wide max's barriers and the new one written after them.
#include "optim/cuda/fused_optim.h"
#include "optim/cuda/ladder.h"
#include "optim/cuda/multi_tensor_apply.cuh"
#include "optim/dynamic_map_bits.h"
#include "optim/low_precision.h"
#include "optim/update_math.h"

namespace mantissa::gpu {
namespace {

namespace um = update_math;
namespace lp = low_precision;

constexpr int kThreads = 256;
constexpr int kBlock = static_cast<int>(lp::kQuantBlock);
constexpr int kPerThread = kBlock / kThreads;
static_assert(kPerThread * kThreads == kBlock);
// 2048-blocks per entry of a launch's list. The list holds 320 entries (optim/multi_tensor.h); one CUDA block each,
// with one 2048-block per entry, left the H200 under a wave per launch and latency-bound (run 3: GPT-2 small's AdamW
// step 4.5 ms against the fused kernel's 1.2 ms, 10% of DRAM bandwidth in Nsight Compute). An entry now covers 32
// 2048-blocks (65536 elements, the fused kernels' chunk) and each gets its own CUDA block: 10240 per launch.
constexpr int kSubBlocks = 32;

// The dynamic maps' bits, [0] signed and [1] unsigned: the host tables' list (optim/dynamic_map_bits.h).
__constant__ uint32_t kMapBits[2][lp::kMapSize] = {{MT_DYNAMIC_MAP_SIGNED_BITS}, {MT_DYNAMIC_MAP_UNSIGNED_BITS}};

// Pointer slots of a ladder list. kStream and kFirst carry integers (the stream id, LadderParam::first), not
// pointers.
enum Slot {
  kParam,
  kGrad,
  kComp,
  kState0,
  kAbsmax0 = kState0 + cpu::kMaxLadderState,
  kCopy = kAbsmax0 + cpu::kMaxLadderState,
  kStep,
  kStream,
  kFirst,
  kDepth
};

struct LadderArgs {
  cpu::LadderOp op;
  double betas[2];  // op's Adam or Lion betas (std::array's operator[] is host code)
  cpu::Storage param, state[cpu::kMaxLadderState];
  int num_state;
  UpdateRounding rounding;
  cpu::CopyDType copy;
  uint64_t seed;
  const float* inv_scale;  // null: a plain step
  const float* found_inf;  // null: a plain step
};
using Meta = multi_tensor::TensorListMeta<kDepth>;
static_assert(sizeof(Meta) + sizeof(LadderArgs) <= multi_tensor::kKernelParamBytes);

__device__ inline float load_value(const void* data, cpu::Storage s, int64_t i, const float* map, float absmax) {
  switch (s) {
    case cpu::Storage::kF32: return static_cast<const float*>(data)[i];
    case cpu::Storage::kBF16: return lp::bf16_value(static_cast<const uint16_t*>(data)[i]);
    case cpu::Storage::kU8Signed:
    case cpu::Storage::kU8Unsigned: return map[static_cast<const uint8_t*>(data)[i]] * absmax;
  }
  return 0.0f;
}

// The largest |x| of the block's values (a nan is skipped, as the CPU's std::max skips it).
__device__ inline float block_absmax(const float (&x)[kPerThread], const bool (&live)[kPerThread], float* scratch) {
  float m = 0.0f;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const float a = fabsf(x[e]);
    if (live[e] && a > m) m = a;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, m, offset);
    m = o > m ? o : m;
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = m;
  __syncthreads();
  float all = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) all = scratch[w] > all ? scratch[w] : all;
  __syncthreads();  // scratch is reused by the next state
  return all;
}

__global__ void __launch_bounds__(kThreads) ladder_kernel(const Meta meta, const LadderArgs a) {
  if (a.found_inf != nullptr && *a.found_inf != 0.0f) return;  // uniform: every thread returns
  __shared__ float maps[2][lp::kMapSize];
  __shared__ float scratch[kThreads / 32];
  __shared__ double step_values[2];
  const bool codes = a.num_state > 0 && (a.state[0] == cpu::Storage::kU8Signed ||
                                         a.state[0] == cpu::Storage::kU8Unsigned);  // one ladder: all or none
  if (codes) {
    for (int i = threadIdx.x; i < 2 * lp::kMapSize; i += kThreads)
      maps[i / lp::kMapSize][i % lp::kMapSize] = __uint_as_float(kMapBits[i / lp::kMapSize][i % lp::kMapSize]);
  }
  // List entry blockIdx.x / kSubBlocks: kSubBlocks 2048-blocks of tensor t, this CUDA block's the sub-th of them.
  const int entry = static_cast<int>(blockIdx.x / kSubBlocks), sub = static_cast<int>(blockIdx.x % kSubBlocks);
  const int t = meta.block_tensor[entry];
  const int64_t chunk = meta.block_chunk[entry];
  const int64_t step = *static_cast<const int64_t*>(meta.ptr[kStep][t]);  // advanced by bump_steps
  // Adam's bias corrections (two f64 pows) once per block, as the fused kernel does: per thread they cost more than
  // the element work (the H200, run 3: 5.0 ms for GPT-2 small's AdamW step against the fused kernel's 1.2 ms).
  if (a.op.kind == cpu::LadderKind::kAdam && threadIdx.x == 0) {
    const um::AdamStepValues v = um::adam_step_values(a.op.adam.lr, a.betas[0], a.betas[1], step);
    step_values[0] = v.bc2_sqrt;
    step_values[1] = v.neg_step_size;
  }
  const auto stream = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(meta.ptr[kStream][t]));
  const auto first = static_cast<int64_t>(reinterpret_cast<uintptr_t>(meta.ptr[kFirst][t]));
  void* param = meta.ptr[kParam][t];
  const void* grad = meta.ptr[kGrad][t];
  uint16_t* comp = static_cast<uint16_t*>(meta.ptr[kComp][t]);
  const float inv = a.inv_scale != nullptr ? *a.inv_scale : 1.0f;
  __syncthreads();  // the maps and Adam's step values are in shared memory

  // The optimizer's constants and flags, as its CPU step builds them (Adam's from this step's count), once per thread.
  const bool scaled = a.inv_scale != nullptr;
  const SGDOptions& so = a.op.sgd;
  const AdamOptions& ao = a.op.adam;
  const LionOptions& lo = a.op.lion;
  um::SgdConstants<float> sc{};
  um::AdamConstants<float> ac{};
  um::LionConstants<float> lc{};
  if (a.op.kind == cpu::LadderKind::kSgd)
    sc = um::sgd_constants<float>(so.lr, so.momentum, so.dampening, so.weight_decay, inv);
  if (a.op.kind == cpu::LadderKind::kAdam)
    ac = um::adam_constants<float>(ao.lr, a.betas[0], a.betas[1], ao.eps, ao.weight_decay, inv,
                                   {.bc2_sqrt = step_values[0], .neg_step_size = step_values[1]});
  if (a.op.kind == cpu::LadderKind::kLion)
    lc = um::lion_constants<float>(lo.lr, a.betas[0], a.betas[1], lo.weight_decay, inv);
  const bool momentum = so.momentum != 0.0;
  const um::SgdFlags sf{.scaled = scaled,
                        .decay = so.weight_decay != 0.0,
                        .momentum = momentum,
                        .use_buffer = momentum && step != 1,
                        .nesterov = momentum && so.nesterov};
  const um::AdamFlags af{.scaled = scaled,
                         .amsgrad = ao.amsgrad,
                         .l2 = a.op.mode == cpu::WeightDecay::kL2 && ao.weight_decay != 0.0,
                         .decoupled = a.op.mode == cpu::WeightDecay::kDecoupled && ao.weight_decay != 0.0};
  const um::LionFlags lf{.scaled = scaled, .decay = lo.weight_decay != 0.0};

  const int64_t k = chunk * kSubBlocks + sub;  // this CUDA block's 2048-block
  const int64_t begin = k * kBlock;
  if (begin >= meta.n[t]) return;  // past the tensor's end: the whole CUDA block, before any barrier
  const int64_t end = begin + kBlock < meta.n[t] ? begin + kBlock : meta.n[t];
  float absmax_old[cpu::kMaxLadderState] = {};
  // Every loop over the state slots is unrolled (j a constant), so the per-slot arrays stay in registers.
#pragma unroll
  for (int j = 0; j < cpu::kMaxLadderState; ++j) {
    const float* am = static_cast<const float*>(meta.ptr[kAbsmax0 + j][t]);
    if (j < a.num_state && am != nullptr) absmax_old[j] = am[k];
  }
  float p[kPerThread], s[cpu::kMaxLadderState][kPerThread] = {};
  bool live[kPerThread];
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int64_t i = begin + threadIdx.x + int64_t{e} * kThreads;
    live[e] = i < end;
    if (!live[e]) {
      p[e] = 0.0f;
      continue;
    }
    p[e] = load_value(param, a.param, i, nullptr, 0.0f);
    const float g = load_value(grad, a.param, i, nullptr, 0.0f);
#pragma unroll
    for (int j = 0; j < cpu::kMaxLadderState; ++j) {
      if (j >= a.num_state) continue;
      const float* map = maps[a.state[j] == cpu::Storage::kU8Unsigned ? 1 : 0];
      s[j][e] = load_value(meta.ptr[kState0 + j][t], a.state[j], i, map, absmax_old[j]);
    }
    switch (a.op.kind) {
      case cpu::LadderKind::kSgd: p[e] = um::sgd_element(p[e], g, s[0][e], sc, sf); break;
      case cpu::LadderKind::kAdam: p[e] = um::adam_element(p[e], g, s[0][e], s[1][e], s[2][e], ac, af); break;
      case cpu::LadderKind::kLion: p[e] = um::lion_element(p[e], g, s[0][e], lc, lf); break;
    }
    // The weights: an fp32 master as it is (and its working copy), bf16 weights by the ladder's rounding.
    if (a.param == cpu::Storage::kF32) {
      static_cast<float*>(param)[i] = p[e];
      void* copy = meta.ptr[kCopy][t];
      if (copy != nullptr) {
        static_cast<uint16_t*>(copy)[i] = a.copy == cpu::CopyDType::kF16
                                              ? mta::Format<mta::Storage::kF16>::store(p[e])
                                              : mta::Format<mta::Storage::kBF16>::store(p[e]);
      }
    } else {
      uint16_t* w = static_cast<uint16_t*>(param) + i;
      switch (a.rounding) {
        case UpdateRounding::kNearest: *w = lp::bf16_nearest(p[e]); break;
        case UpdateRounding::kStochastic:
          *w = lp::bf16_stochastic(
              p[e], lp::update_random(a.seed, stream, static_cast<uint32_t>(step), static_cast<uint64_t>(first + i)));
          break;
        case UpdateRounding::kKahan: lp::kahan_bf16(*w, comp[i], p[e]); break;
      }
    }
  }
  // The state: f32 as it is, bf16 to nearest, 8 bits re-quantized with the block's new absmax.
#pragma unroll
  for (int j = 0; j < cpu::kMaxLadderState; ++j) {
    if (j >= a.num_state) continue;  // uniform over the block: block_absmax's barriers are met by every thread
    void* data = meta.ptr[kState0 + j][t];
    const cpu::Storage st = a.state[j];
    if (st == cpu::Storage::kU8Signed || st == cpu::Storage::kU8Unsigned) {
      const float m = block_absmax(s[j], live, scratch);  // every thread takes part (uniform branch)
      const float* map = maps[st == cpu::Storage::kU8Unsigned ? 1 : 0];
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) {
        const int64_t i = begin + threadIdx.x + int64_t{e} * kThreads;
        const lp::CodeRounding r = st == cpu::Storage::kU8Signed ? lp::CodeRounding::kNearest : lp::CodeRounding::kUp;
        if (live[e]) static_cast<uint8_t*>(data)[i] = lp::code_of(map, m > 0.0f ? s[j][e] / m : 0.0f, r);
      }
      if (threadIdx.x == 0) static_cast<float*>(meta.ptr[kAbsmax0 + j][t])[k] = m;
      continue;
    }
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const int64_t i = begin + threadIdx.x + int64_t{e} * kThreads;
      if (!live[e]) continue;
      if (st == cpu::Storage::kF32) {
        static_cast<float*>(data)[i] = s[j][e];
      } else {
        static_cast<uint16_t*>(data)[i] = lp::bf16_nearest(s[j][e]);
      }
    }
  }
}

}  // namespace

void ladder_step(std::span<const cpu::LadderParam> params, const PrecisionLadder& ladder, const cpu::LadderOp& op,
                 cpu::ScalingPointers scaling, cudaStream_t stream) {
  MT_CHECK((scaling.inv_scale == nullptr) == (scaling.found_inf == nullptr),
           "ladder step (CUDA): inv_scale and found_inf come together");
  if (params.empty()) return;
  const auto& betas = op.kind == cpu::LadderKind::kLion ? op.lion.betas : op.adam.betas;
  LadderArgs args{.op = op,
                  .betas = {betas[0], betas[1]},
                  .param = params.front().param.storage,
                  .state = {},
                  .num_state = params.front().num_state,
                  .rounding = ladder.update_rounding,
                  .copy = cpu::CopyDType::kNone,
                  .seed = ladder.seed,
                  .inv_scale = scaling.inv_scale,
                  .found_inf = scaling.found_inf};
  for (int j = 0; j < args.num_state; ++j) args.state[j] = params.front().state[j].storage;
  std::vector<void*> ptrs[kDepth];
  std::vector<int64_t> sizes;
  std::vector<int64_t*> steps;
  for (const cpu::LadderParam& t : params) {
    MT_CHECK(t.param.storage == args.param && t.num_state == args.num_state,
             "ladder step (CUDA): the parameters of one group share one ladder");
    if (t.copy.data != nullptr) args.copy = t.copy.dtype;
    ptrs[kParam].push_back(t.param.data);
    ptrs[kGrad].push_back(const_cast<void*>(t.grad));
    ptrs[kComp].push_back(t.compensation);
    for (int j = 0; j < cpu::kMaxLadderState; ++j) {
      ptrs[kState0 + j].push_back(j < t.num_state ? t.state[j].data : nullptr);
      ptrs[kAbsmax0 + j].push_back(j < t.num_state ? t.state[j].absmax : nullptr);
    }
    ptrs[kCopy].push_back(t.copy.data);
    ptrs[kStep].push_back(t.step);
    ptrs[kStream].push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(t.stream)));
    ptrs[kFirst].push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(t.first)));
    sizes.push_back(t.n);
    steps.push_back(t.step);
  }
  bump_steps(steps, scaling.found_inf, stream);
  const auto launches =
      multi_tensor::plan(sizes, {.max_tensors = multi_tensor::max_tensors(kDepth), .chunk_size = kBlock * kSubBlocks});
  for (const auto& l : launches) {
    Meta meta{};
    multi_tensor::fill_meta(l, ptrs, sizes, meta);
    ladder_kernel<<<static_cast<unsigned>(l.blocks.size() * kSubBlocks), kThreads, 0, stream>>>(meta, args);
    MT_CUDA_LAUNCH_CHECK("ladder_kernel");
  }
}

}  // namespace mantissa::gpu

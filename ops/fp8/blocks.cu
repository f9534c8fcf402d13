// The CUDA kernels of the block-scaled ops (ops/fp8/blocks.h, ops/fp8/blocks_kernels.h): the CPU kernels' bits,
// from ops/fp8/block_math.h's functions (checked on the H200 of 2026-11-28: bench/gpu/2026-11-28-run2).
//
// quantize_blocks: the tensor's amax first (ops/fp8's amax kernel), then one thread block per tile: its threads
// fold the tile's max |x| as float bits (a maximum: the order does not matter), thread 0 computes the tile's
// scale into shared memory, and every thread casts its elements, each with the random word of its flat index
// (stochastic rounding needs no state shared between threads). The counts join the totals with one atomicAdd per
// tile. hadamard16: one thread per 16-element block, the CPU's butterfly sequence. block_scaled_mm: the f32
// path, block by block of K: both operands decoded to f32 (exact), the f32 GEMM of the block, and a kernel that
// adds part * scale_a * scale_b into the f32 total (the CPU's order of operations per element), then the
// epilogue (alpha, bias, one rounding). On Hopper, 128-wide blocks go to cuBLASLt's block-scaled FP8 GEMM first
// (hopper_block_gemm, below); on Blackwell (compute capability 10.0 and later), MXFP8's 32-wide and NVFP4's
// 16-wide blocks go to cuBLASLt's VEC32_UE8M0 and VEC16_UE4M3 modes (blackwell_block_gemm: E2M1 packed two to
// a byte, the scales as bytes in cuBLASLt's tiled layout). That path is written and compiled only: no Blackwell
// GPU has run it. MXFP4, and every GPU before Blackwell, takes the f32 path.
#include <algorithm>
#include <cmath>

#include "framework/cuda/check.h"
#include "framework/cuda/copy_math.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/device_types.cuh"
#include "ops/fp8/block_math.h"
#include "ops/fp8/blocks_kernels.h"
#include "ops/fp8/fp8_cuda.h"
#include "ops/fp8/fp8_launch.h"
#include "ops/fp8/fp8_plan.h"
#include "ops/fp8/fp8_tensors.h"
#include "ops/matmul/gemm_launch.h"
#include "ops/matmul/gemm_plan.h"

namespace mantissa::gpu {
namespace {

constexpr int kThreads = 256;

// BlockQuantOptions without its tensor (a kernel argument must be trivially copyable).
struct TileParams {
  BlockElement element;
  BlockScaleRule rule;
  Fp8Overflow overflow;
  bool tensor_scale;
  bool stochastic;
  int64_t block_rows;
  int64_t block_cols;
  uint64_t seed;
  uint64_t offset;
};

template <typename S>
__global__ void __launch_bounds__(kThreads)
    quantize_tiles_kernel(const S* __restrict__ x, int64_t rows, int64_t cols, TileParams o, float pow2_margin,
                          const float* __restrict__ tensor_amax, const float* __restrict__ given_tensor_decode,
                          uint8_t* __restrict__ out, float* __restrict__ scale_inv, int32_t* __restrict__ scale_bits,
                          float* __restrict__ tensor_scale_inv, unsigned long long* __restrict__ overflow,
                          unsigned long long* __restrict__ underflow) {
  const int64_t tile_cols = (cols + o.block_cols - 1) / o.block_cols;
  const int64_t t = blockIdx.x / tile_cols, u = blockIdx.x % tile_cols;
  const int64_t r0 = t * o.block_rows, r1 = min(rows, r0 + o.block_rows);
  const int64_t c0 = u * o.block_cols, c1 = min(cols, c0 + o.block_cols);
  const int64_t width = c1 - c0, count = (r1 - r0) * width;
  __shared__ uint32_t scratch[32];
  __shared__ fp8::BlockScale shared_scale;
  uint32_t m = 0;
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    const int64_t i = (r0 + e / width) * cols + c0 + e % width;
    m = max(m, fp8::abs_bits(float_to_bits(widen(x[i]))));
  }
  for (int offset = 16; offset > 0; offset >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = m;
  __syncthreads();
  const bool nvfp4_tensor = o.rule == BlockScaleRule::kNvfp4 && o.tensor_scale;
  const float tensor_decode = !nvfp4_tensor                    ? 1.0f
                              : given_tensor_decode != nullptr ? *given_tensor_decode
                                                               : fp8::nvfp4_tensor_decode(*tensor_amax);
  if (threadIdx.x == 0) {
    uint32_t tile = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) tile = max(tile, scratch[w]);
    shared_scale = fp8::block_scale(o.rule, o.element, fp8::float_of(tile), pow2_margin, nvfp4_tensor, tensor_decode);
    scale_inv[blockIdx.x] = shared_scale.dequant;
    if (scale_bits != nullptr) scale_bits[blockIdx.x] = static_cast<int32_t>(shared_scale.stored);
    if (nvfp4_tensor && blockIdx.x == 0) *tensor_scale_inv = tensor_decode;
  }
  __syncthreads();
  const fp8::BlockScale s = shared_scale;
  fp8::ElementStats stats;
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    const int64_t i = (r0 + e / width) * cols + c0 + e % width;
    const uint32_t random = o.stochastic ? fp8::rounding_bits(o.seed, o.offset, static_cast<uint64_t>(i)) : 0u;
    out[i] = fp8::cast_element(widen(x[i]), s, o.element, o.overflow, o.stochastic, random, stats);
  }
  const uint32_t over = block_sum(stats.overflow, scratch);
  const uint32_t under = block_sum(stats.underflow, scratch);
  if (threadIdx.x == 0) {
    if (over != 0u) atomicAdd(overflow, static_cast<unsigned long long>(over));
    if (under != 0u) atomicAdd(underflow, static_cast<unsigned long long>(under));
  }
}

template <typename S>
__global__ void __launch_bounds__(kThreads)
    hadamard16_kernel(const S* __restrict__ x, int64_t rows, int64_t cols, const float* __restrict__ signs,
                      float* __restrict__ out) {
  const int64_t per_row = (cols + 15) / 16;
  for (int64_t g = global_thread(); g < rows * per_row; g += grid_threads()) {
    const int64_t r = g / per_row, c = (g % per_row) * 16;
    const int64_t i = r * cols + c;
    if (c + 16 > cols) {  // the short last block: copied
      for (int64_t j = 0; c + j < cols; ++j) out[i + j] = widen(x[i + j]);
      continue;
    }
    float v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = widen(x[i + j]) * signs[j];
      // The CPU's butterflies (each stage's pairs are independent): constant trip counts, so that every index
      // is a constant after unrolling and v stays in registers.
#pragma unroll
    for (int stage = 0; stage < 4; ++stage) {
      const int h = 1 << stage;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        if ((j & h) == 0) {
          const float p = v[j], q = v[j + h];
          v[j] = p + q;
          v[j + h] = p - q;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) out[i + j] = v[j] * 0.25f;
  }
}

// total[i, j] += part[i, j] * (sa[i * blocks + blk] * sb[blk * b_cols + (per_column ? j : j / block_k)]).
__global__ void __launch_bounds__(kThreads)
    add_block_kernel(const float* __restrict__ part, int64_t m, int64_t n, const float* __restrict__ sa,
                     const float* __restrict__ sb, int64_t blocks, int64_t blk, int64_t b_cols, bool per_column,
                     int64_t block_k, float* __restrict__ total) {
  for (int64_t e = global_thread(); e < m * n; e += grid_threads()) {
    const int64_t i = e / n, j = e % n;
    const float s_col = sb[blk * b_cols + (per_column ? j : j / block_k)];
    total[e] += part[e] * (sa[i * blocks + blk] * s_col);
  }
}

template <typename O>
__global__ void __launch_bounds__(kThreads)
    alpha_epilogue_kernel(const float* acc, int64_t total, int64_t n, const float* __restrict__ alpha,
                          const float* __restrict__ bias, O* out) {
  const float s = alpha != nullptr ? *alpha : 1.0f;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const float v = bias != nullptr ? fp8::epilogue(acc[e], s, bias[e % n]) : fp8::epilogue(acc[e], s);
    out[e] = narrow<O>(v);
  }
}

// out [rows, cols / 2] = x's E2M1 elements (E4M3 bytes, x [rows, cols] with element strides rs and cs, cols
// even) packed two to a byte, the first in the low nibble (fp8::pack_e2m1_pair).
__global__ void __launch_bounds__(kThreads) pack_e2m1_kernel(const uint8_t* __restrict__ x, int64_t rows, int64_t cols,
                                                             int64_t rs, int64_t cs, uint8_t* __restrict__ out) {
  const int64_t half = cols / 2;
  for (int64_t e = global_thread(); e < rows * half; e += grid_threads()) {
    const uint8_t* p = x + (e / half) * rs + 2 * (e % half) * cs;
    out[e] = fp8::pack_e2m1_pair(p[0], p[cs]);
  }
}

// The scales of an operand [rows, blocks of K] as cuBLASLt's tiled bytes (fp8::block_scale_offset; out holds
// fp8::block_scale_bytes, zeroed first): the scale of (row, block) is s[(row / row_group) * row_stride + block *
// block_stride] (row_group > 1: one scale for a square block's rows), as E8M0 (fp8::mx_scale_of) or as the E4M3
// byte of NVFP4's block scale (exact: it was one).
__global__ void __launch_bounds__(kThreads)
    tile_scales_kernel(const float* __restrict__ s, int64_t rows, int64_t blocks, int64_t row_stride,
                       int64_t block_stride, int64_t row_group, bool e8m0, uint8_t* __restrict__ out) {
  const int64_t padded = (blocks + 3) / 4 * 4;
  for (int64_t e = global_thread(); e < rows * blocks; e += grid_threads()) {
    const int64_t r = e / blocks, blk = e % blocks;
    const float v = s[(r / row_group) * row_stride + blk * block_stride];
    out[fp8::block_scale_offset(r, blk, padded)] =
        e8m0 ? fp8::mx_scale_of(v) : Fp8E4M3Format::from_f32_bits(fp8::bits_of(v), Fp8Overflow::kSaturate);
  }
}

unsigned grid_for(int64_t work, int device) {
  const int64_t limit = int64_t{multiprocessor_count(device)} * 8;
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(work, kThreads), 1, limit));
}

}  // namespace
}  // namespace mantissa::gpu

namespace mantissa {
namespace {

using fp8_tensors::alignment_of;
using fp8_tensors::dispatch_input;
using fp8_tensors::operand_of;

// out = d * alpha + bias, rounded once to out's dtype (d f32 [M, N], may be out itself; alpha 0-d f32 and bias
// may be undefined): a cuBLASLt block GEMM's result finished in the CPU's order (fp8::epilogue).
void finish_block_gemm(const Tensor& d, const Tensor& alpha, const Tensor& bias, const Tensor& out,
                       cudaStream_t stream) {
  const int device = out.device().index;
  const int64_t m = out.size(0), n = out.size(1);
  const Tensor bias32 = bias.defined() ? bias.to(DType::kF32).contiguous() : Tensor();
  const float* alpha_ptr = alpha.defined() ? alpha.data<float>() : nullptr;
  const float* bias_ptr = bias32.defined() ? bias32.data<float>() : nullptr;
  switch (out.dtype()) {
    case DType::kF32:
      return gpu::launch_scaled_mm_epilogue<float>(d.data<float>(), m, n, alpha_ptr, nullptr, bias_ptr,
                                                   out.data<float>(), device, stream);
    case DType::kBF16:
      return gpu::launch_scaled_mm_epilogue<BFloat16>(d.data<float>(), m, n, alpha_ptr, nullptr, bias_ptr,
                                                      out.data<BFloat16>(), device, stream);
    default:
      return gpu::launch_scaled_mm_epilogue<Half>(d.data<float>(), m, n, alpha_ptr, nullptr, bias_ptr, out.data<Half>(),
                                                  device, stream);
  }
}

// Whether b's scales ([blocks, N] or [blocks, ceil(N / block_k)]) hold one per column rather than one per square
// block (for N = 1 both shapes agree: per column).
bool scales_per_column(const Tensor& sb, int64_t n, int64_t block_k) {
  return sb.size(1) == n && n != (n + block_k - 1) / block_k;
}

// The tail both cuBLASLt block paths share, once their operands and scales are laid out: `key` with everything but
// the output's dtype and the alignments; D is out, or an f32 scratch when alpha or a bias must follow a 16-bit out;
// then alpha and the bias by the epilogue kernel. False, out untouched, where cuBLASLt declines.
bool run_block_gemm(gpu::Fp8GemmKey key, const Tensor& a_k, const Tensor& bt, const void* scale_a, const void* scale_b,
                    const Tensor& alpha, const Tensor& bias, const Tensor& out, cudaStream_t stream) {
  const bool after = alpha.defined() || bias.defined();
  const Tensor d = after && out.dtype() != DType::kF32 ? empty({key.m, key.n}, {.device = out.device()}) : out;
  key.d = d.dtype();
  key.align_a = alignment_of(a_k);
  key.align_b = alignment_of(bt);
  key.align_d = alignment_of(d);
  if (!gpu::fp8_gemm({.key = key,
                      .a = a_k.data_ptr(),
                      .bt = bt.data_ptr(),
                      .scale_inv_a = scale_a,
                      .scale_inv_b = scale_b,
                      .d = d.data_ptr()},
                     stream))
    return false;
  if (after) finish_block_gemm(d, alpha, bias, out, stream);  // one rounding to out's dtype
  gpu::count_scaled_mm({.fp8_gemms = 1});
  return true;
}

// Hopper (sm_90): cuBLASLt's block-scaled FP8 GEMM with DeepSeek-V3's scales, as torch._scaled_mm runs it (a's
// 1x128 scales as VEC128_32F, b's 1x128 or 128x128 as VEC128_32F or BLK128x128_32F; cuBLAS's A is our b). The scale
// layouts are cuBLASLt's (its documentation, "Block Scaling Factors Layout"): VEC128 M-major (offset row + block *
// rows), BLK128x128 K-major with the column stride padded to a multiple of 4. Returns false, having done nothing,
// where this path does not apply (another GPU or block width, alpha, shapes cuBLASLt's FP8 GEMM does not take: M
// and N multiples of 4, K of 16) or cuBLASLt declines: the f32 path runs then. Ran on the H200 (run2): the CPU's
// tensor-core model's sums bit for bit; with 1x128 scales on both sides, f32 outputs one ulp off in places.
bool hopper_block_gemm(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, int64_t block_k,
                       const Tensor& alpha, const Tensor& bias, const Tensor& out, cudaStream_t stream) {
  const int device = a.device().index;
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1), blocks = (k + 127) / 128;
  if (block_k != 128 || alpha.defined() || gpu::compute_capability(device) != 90 || m % 4 != 0 || n % 4 != 0)
    return false;
  const bool b_per_column = scales_per_column(sb, n, 128);
  gpu::ScaledMmPlan plan = gpu::plan_scaled_mm(
      {.a = operand_of(a), .b = operand_of(b), .out = out.dtype(), .sm = gpu::compute_capability(device)});
  if (plan.path != gpu::ScaledMmPath::kCublasLtFp8) return false;
  const Tensor sa_layout = sa.t().contiguous();  // [blocks, M]: offset row + block * M
  Tensor sb_layout;
  if (b_per_column) {
    sb_layout = sb.contiguous();  // [blocks, N]: offset column + block * N
  } else {
    const int64_t padded = (blocks + 3) / 4 * 4, col_blocks = sb.size(1);
    sb_layout = zeros({col_blocks, padded}, {.device = a.device()});  // offset block + column block * padded
    copy_(sb_layout.slice(1, 0, blocks), sb.t());
  }
  const Tensor a_k = plan.copy_a ? a.clone() : a;
  const Tensor bt = plan.copy_b ? b.t().clone() : b.t();
  return run_block_gemm({.device = device,
                         .scale_a = gpu::Fp8ScaleMode::kVec128,
                         .scale_b = b_per_column ? gpu::Fp8ScaleMode::kVec128 : gpu::Fp8ScaleMode::kBlock128x128,
                         .a = a_k.dtype(),
                         .b = bt.dtype(),
                         .m = m,
                         .n = n,
                         .k = k,
                         .lda = plan.lda,
                         .ldb = plan.ldb},
                        a_k, bt, sa_layout.data<float>(), sb_layout.data<float>(), alpha, bias, out, stream);
}

// Blackwell (compute capability 10.0 and later): cuBLASLt's block-scaled GEMM for MXFP8 (VEC32_UE8M0: E4M3/E5M2
// operands, an E8M0 byte per 32 of K) and NVFP4 (VEC16_UE4M3: E2M1 operands packed two to a byte, an E4M3 byte
// per 16 of K; alpha carries the two per-tensor scales), as Transformer Engine and torch._scaled_mm run them. The
// scales go in as bytes in cuBLASLt's tiled layout (fp8::block_scale_offset); NVFP4's 16x16 weight blocks as
// one scale per column of each. alpha and the bias are applied after, by the epilogue kernel, in the CPU's order.
// Returns false, having written nothing to out, where gpu::plan_micro_scaled_mm refuses the case (another GPU,
// MXFP4, another block width, shapes) or cuBLASLt declines it: the f32 path runs then. Written and compiled, never
// run: no Blackwell GPU has been lent. Its sums are the tensor core's, not the CPU's f32 sum of all K products
// (block_scaled_mm's header): the device check compares them within a tolerance.
bool blackwell_block_gemm(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, int64_t block_k,
                          bool e2m1, const Tensor& alpha, const Tensor& bias, const Tensor& out, cudaStream_t stream) {
  const int device = a.device().index;
  const int sm = gpu::compute_capability(device);
  if (sm < 100) return false;
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1), blocks = k / block_k;
  const gpu::MicroScaledPlan plan =
      gpu::plan_micro_scaled_mm({.a = operand_of(a), .b = operand_of(b), .out = out.dtype(), .sm = sm}, block_k, e2m1);
  if (!plan.ok) return false;
  Tensor a_k, bt;
  int64_t lda = k, ldb = k;
  if (e2m1) {  // packed [M, K / 2] and [N, K / 2]
    a_k = empty({m, k / 2}, {.dtype = DType::kU8, .device = a.device()});
    bt = empty({n, k / 2}, {.dtype = DType::kU8, .device = a.device()});
    gpu::pack_e2m1_kernel<<<gpu::grid_for(m * k / 2, device), gpu::kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(a.data_ptr()), m, k, a.stride(0), a.stride(1), a_k.data<uint8_t>());
    gpu::pack_e2m1_kernel<<<gpu::grid_for(n * k / 2, device), gpu::kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(b.data_ptr()), n, k, b.stride(1), b.stride(0), bt.data<uint8_t>());
    MT_CUDA_LAUNCH_CHECK("block_scaled_mm pack_e2m1 kernel");
  } else {
    a_k = plan.operands.copy_a ? a.clone() : a;
    bt = plan.operands.copy_b ? b.t().clone() : b.t();
    lda = plan.operands.lda;
    ldb = plan.operands.ldb;
  }
  // sa [M, blocks]; sb [blocks, N] or [blocks, ceil(N / block_k)], read as [N, blocks].
  const bool b_per_column = scales_per_column(sb, n, block_k);
  const auto tiled = [&](const Tensor& s, int64_t rows, int64_t row_stride, int64_t block_stride, int64_t group) {
    Tensor t = zeros({fp8::block_scale_bytes(rows, blocks)}, {.dtype = DType::kU8, .device = a.device()});
    gpu::tile_scales_kernel<<<gpu::grid_for(rows * blocks, device), gpu::kThreads, 0, stream>>>(
        s.data<float>(), rows, blocks, row_stride, block_stride, group, !e2m1, t.data<uint8_t>());
    MT_CUDA_LAUNCH_CHECK("block_scaled_mm tile_scales kernel");
    return t;
  };
  const Tensor sa_tiles = tiled(sa, m, sa.stride(0), sa.stride(1), 1);
  const Tensor sb_tiles = tiled(sb, n, sb.stride(1), sb.stride(0), b_per_column ? 1 : block_k);
  return run_block_gemm({.device = device,
                         .scale_a = plan.mode,
                         .scale_b = plan.mode,
                         .a = a.dtype(),
                         .b = b.dtype(),
                         .e2m1 = e2m1,
                         .m = m,
                         .n = n,
                         .k = k,
                         .lda = lda,
                         .ldb = ldb},
                        a_k, bt, sa_tiles.data_ptr(), sb_tiles.data_ptr(), alpha, bias, out, stream);
}

}  // namespace

void cuda_quantize_blocks(const Tensor& x, const BlockQuantOptions& o, const BlockQuantized& q) {
  gpu::DeviceGuard guard(x.device());
  const cudaStream_t stream = gpu::current_stream(x.device());
  const int64_t rows = x.size(0), cols = x.size(1);
  cuda_amax(x, q.amax);
  MT_CUDA_CHECK(cudaMemsetAsync(q.overflow.data_ptr(), 0, sizeof(int64_t), stream));
  MT_CUDA_CHECK(cudaMemsetAsync(q.underflow.data_ptr(), 0, sizeof(int64_t), stream));
  const int64_t tiles = q.scale_inv.numel();
  if (rows == 0 || cols == 0 || tiles == 0) return;
  const float pow2_margin = static_cast<float>(std::ldexp(1.0, static_cast<int>(o.margin)));
  const gpu::TileParams params{.element = o.element,
                               .rule = o.rule,
                               .overflow = o.overflow,
                               .tensor_scale = o.tensor_scale,
                               .stochastic = o.stochastic,
                               .block_rows = o.block_rows,
                               .block_cols = o.block_cols,
                               .seed = o.seed,
                               .offset = o.offset};
  dispatch_input(x.dtype(), [&]<typename T>() {
    using S = gpu::storage_t<T>;
    gpu::quantize_tiles_kernel<S><<<static_cast<unsigned>(tiles), gpu::kThreads, 0, stream>>>(
        reinterpret_cast<const S*>(x.data<T>()), rows, cols, params, pow2_margin, q.amax.data<float>(),
        o.tensor_scale_inv.defined() ? o.tensor_scale_inv.data<float>() : nullptr,
        static_cast<uint8_t*>(q.data.data_ptr()), q.scale_inv.data<float>(),
        q.scale_bits.defined() ? q.scale_bits.data<int32_t>() : nullptr,
        q.tensor_scale_inv.defined() ? q.tensor_scale_inv.data<float>() : nullptr,
        reinterpret_cast<unsigned long long*>(q.overflow.data_ptr()),
        reinterpret_cast<unsigned long long*>(q.underflow.data_ptr()));
  });
  MT_CUDA_LAUNCH_CHECK("quantize_blocks kernel");
}

void cuda_hadamard16(const Tensor& x, const Tensor& signs, const Tensor& out) {
  gpu::DeviceGuard guard(x.device());
  const cudaStream_t stream = gpu::current_stream(x.device());
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0 || cols == 0) return;
  dispatch_input(x.dtype(), [&]<typename T>() {
    using S = gpu::storage_t<T>;
    gpu::hadamard16_kernel<S><<<gpu::grid_for(rows * ((cols + 15) / 16), x.device().index), gpu::kThreads, 0, stream>>>(
        reinterpret_cast<const S*>(x.data<T>()), rows, cols, signs.data<float>(), out.data<float>());
  });
  MT_CUDA_LAUNCH_CHECK("hadamard16 kernel");
}

void cuda_block_scaled_mm(const Tensor& a, const Tensor& b, const Tensor& sa_in, const Tensor& sb_in, int64_t block_k,
                          bool e2m1, const Tensor& alpha, const Tensor& bias, const Tensor& out) {
  const int device = a.device().index;
  gpu::DeviceGuard guard(device);
  const cudaStream_t stream = gpu::current_stream(a.device());
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1), blocks = (k + block_k - 1) / block_k;
  if (m == 0 || n == 0) return;
  if (k > 0 && hopper_block_gemm(a, b, sa_in, sb_in, block_k, alpha, bias, out, stream)) return;
  if (k > 0 && blackwell_block_gemm(a, b, sa_in, sb_in, block_k, e2m1, alpha, bias, out, stream)) return;
  const Tensor sa = sa_in.contiguous(), sb = sb_in.contiguous();
  const Tensor af = a.to(DType::kF32), bf = b.to(DType::kF32);  // exact, dense row-major
  const Tensor total = zeros({m, n}, {.device = a.device()});
  const Tensor part = empty({m, n}, {.device = a.device()});
  const int64_t b_cols = sb.size(1);
  const bool per_column = scales_per_column(sb, n, block_k);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t l0 = blk * block_k, width = std::min(block_k, k - l0);
    gpu::gemm(gpu::GemmArgs<float>{.gemm = {.gemm = {.m = m,
                                                     .n = n,
                                                     .k = width,
                                                     .a = af.data<float>() + l0,
                                                     .lda = k,
                                                     .b = bf.data<float>() + l0 * n,
                                                     .ldb = n,
                                                     .c = part.data<float>(),
                                                     .ldc = n,
                                                     .alpha = 1.0,
                                                     .beta = 0.0},
                                            .batch = 1,
                                            .stride_c = m * n}},
              device, stream);
    gpu::add_block_kernel<<<gpu::grid_for(m * n, device), gpu::kThreads, 0, stream>>>(
        part.data<float>(), m, n, sa.data<float>(), sb.data<float>(), blocks, blk, b_cols, per_column, block_k,
        total.data<float>());
    MT_CUDA_LAUNCH_CHECK("block_scaled_mm add kernel");
  }
  const Tensor bias32 = bias.defined() ? bias.to(DType::kF32).contiguous() : Tensor();
  const float* alpha_ptr = alpha.defined() ? alpha.data<float>() : nullptr;
  const float* bias_ptr = bias32.defined() ? bias32.data<float>() : nullptr;
  auto epilogue = [&]<typename O>(O* o) {
    gpu::alpha_epilogue_kernel<O><<<gpu::grid_for(m * n, device), gpu::kThreads, 0, stream>>>(
        total.data<float>(), m * n, n, alpha_ptr, bias_ptr, o);
    MT_CUDA_LAUNCH_CHECK("block_scaled_mm epilogue kernel");
  };
  switch (out.dtype()) {
    case DType::kF32: return epilogue(out.data<float>());
    case DType::kBF16: return epilogue(reinterpret_cast<gpu::storage_t<BFloat16>*>(out.data<BFloat16>()));
    case DType::kF16: return epilogue(reinterpret_cast<gpu::storage_t<Half>*>(out.data<Half>()));
    default: MT_THROW("block_scaled_mm: unexpected out dtype ", dtype_name(out.dtype()));
  }
}

}  // namespace mantissa

// Block-scaled quantization, the 16x16 Hadamard transform and the block-scaled GEMM (ops/fp8/blocks.h): the
// entries' checks and the CPU kernels. A tile row of the quantization is one task of the thread pool: its
// tiles' amaxes, scales and elements (ops/fp8/block_math.h) are computed in one pass over its rows, and its
// counts join the totals once.
#include "ops/fp8/blocks.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "framework/device_kernels.h"
#include "framework/error.h"
#include "framework/parallel.h"
#include "framework/philox.h"
#include "ops/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/fp8/blocks_kernels.h"

namespace mantissa {
namespace {

Tensor detached(const Tensor& t) { return t.defined() ? t.detach() : t; }

const char* element_name(BlockElement e) {
  return e == BlockElement::kE4M3 ? "E4M3" : (e == BlockElement::kE5M2 ? "E5M2" : "E2M1");
}
const char* rule_name(BlockScaleRule r) {
  switch (r) {
    case BlockScaleRule::kF32: return "f32";
    case BlockScaleRule::kF32Pow2: return "f32 power of two";
    case BlockScaleRule::kE8M0: return "E8M0 (MX)";
    case BlockScaleRule::kE8M0Rceil: return "E8M0 RCEIL (MX)";
    case BlockScaleRule::kNvfp4: return "NVFP4 (E4M3 blocks)";
  }
  return "?";
}

// ---- CPU kernels ----

// One row of len elements: y = x * f (x / f for the dividing rules) with f = factors[j], its tile's factor, then
// encode_element. The element format and the modes are template arguments, so the loop has no branches left
// but the element's own selects, and vectorizes (stochastic rounding's Philox blocks excepted).
template <BlockElement kElement, bool kDivide, bool kStochastic>
void cast_run(const float* __restrict x, int64_t len, const float* __restrict factors, Fp8Overflow overflow,
              uint64_t seed, uint64_t offset, uint64_t index0, uint8_t* __restrict out, fp8::ElementStats& stats) {
  constexpr int64_t kChunk = 256, kBlocks = kChunk / 4 + 1;
  // Stochastic rounding: element i's word is word i % 4 of Philox block i / 4 (fp8::rounding_bits). The chunk's
  // blocks are computed together, one block per lane (the loop vectorizes), then laid out in index order.
  alignas(64) uint32_t words[4][kBlocks];
  alignas(64) uint32_t random[4 * kBlocks];
  uint32_t over = 0, under = 0;
  for (int64_t c0 = 0; c0 < len; c0 += kChunk) {
    const int64_t n = std::min(kChunk, len - c0);
    int64_t skip = 0;  // the chunk's first index within its first block
    if constexpr (kStochastic) {
      const uint64_t first = index0 + static_cast<uint64_t>(c0), block0 = first >> 2;
      skip = static_cast<int64_t>(first & 3u);
      const int64_t blocks = (skip + n + 3) / 4;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint64_t block = block0 + static_cast<uint64_t>(b);
        const Philox4 p = philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                        static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                                        static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
        words[0][b] = p.v[0];
        words[1][b] = p.v[1];
        words[2][b] = p.v[2];
        words[3][b] = p.v[3];
      }
      for (int64_t b = 0; b < blocks; ++b)
        for (int w = 0; w < 4; ++w) random[4 * b + w] = words[w][b];
    }
    for (int64_t j = 0; j < n; ++j) {
      const float f = factors[c0 + j];
      const float y = kDivide ? x[c0 + j] / f : x[c0 + j] * f;
      fp8::ElementStats st;
      out[c0 + j] =
          fp8::encode_element(x[c0 + j], y, kElement, overflow, kStochastic, kStochastic ? random[skip + j] : 0u, st);
      over += st.overflow;
      under += st.underflow;
    }
  }
  stats.overflow += over;
  stats.underflow += under;
}

using CastRun = void (*)(const float*, int64_t, const float*, Fp8Overflow, uint64_t, uint64_t, uint64_t, uint8_t*,
                         fp8::ElementStats&);

CastRun pick_run(BlockElement element, bool divide, bool stochastic) {
  switch (element) {
    case BlockElement::kE4M3:
      return divide ? &cast_run<BlockElement::kE4M3, true, false> : &cast_run<BlockElement::kE4M3, false, false>;
    case BlockElement::kE5M2:
      return divide ? &cast_run<BlockElement::kE5M2, true, false> : &cast_run<BlockElement::kE5M2, false, false>;
    case BlockElement::kE2M1:
      if (stochastic)
        return divide ? &cast_run<BlockElement::kE2M1, true, true> : &cast_run<BlockElement::kE2M1, false, true>;
      return divide ? &cast_run<BlockElement::kE2M1, true, false> : &cast_run<BlockElement::kE2M1, false, false>;
  }
  return nullptr;
}

// max |x| over a run, as float bits (nan's bits lie above inf's: the integer maximum propagates a nan).
inline uint32_t amax_run(const float* __restrict x, int64_t len) {
  uint32_t m = 0;
  for (int64_t j = 0; j < len; ++j) m = std::max(m, fp8::abs_bits(std::bit_cast<uint32_t>(x[j])));
  return m;
}

// One pass per tile row: the amaxes of its tiles (for column tiles, br x 1, all columns at once, row by row), their
// scales, each spread over its tile's columns as a row of factors, then every row of the tile row cast in one run
// with those factors. The rows are read contiguously whatever the tile's shape.
void cpu_quantize_blocks(const Tensor& x_in, const BlockQuantOptions& o, const BlockQuantized& q) {
  const Tensor x = x_in.dtype() == DType::kF32 ? x_in : x_in.to(DType::kF32);
  const int64_t rows = x.size(0), cols = x.size(1), br = o.block_rows, bc = o.block_cols;
  const int64_t tile_rows = (rows + br - 1) / br, tile_cols = (cols + bc - 1) / bc;
  const float* px = x.data<float>();
  auto* out = static_cast<uint8_t*>(q.data.data_ptr());
  float* scale_inv = q.scale_inv.data<float>();
  int32_t* scale_bits = q.scale_bits.defined() ? q.scale_bits.data<int32_t>() : nullptr;
  // The tensor's amax is the maximum of its tiles'; only NVFP4's per-tensor scale needs it before the tiles, in a
  // pass of its own.
  std::atomic<uint32_t> amax{0};
  auto fold_amax = [&amax](uint32_t m) {
    uint32_t seen = amax.load(std::memory_order_relaxed);
    while (m > seen && !amax.compare_exchange_weak(seen, m, std::memory_order_relaxed)) {
    }
  };
  const bool nvfp4_tensor = o.rule == BlockScaleRule::kNvfp4 && o.tensor_scale;
  const bool amax_first = nvfp4_tensor && !o.tensor_scale_inv.defined();
  if (amax_first) {
    parallel_for(rows, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(cols, 1)),
                 [&](int64_t r0, int64_t r1) { fold_amax(amax_run(px + r0 * cols, (r1 - r0) * cols)); });
  }
  const float tensor_decode = !nvfp4_tensor ? 1.0f
                              : o.tensor_scale_inv.defined()
                                  ? *o.tensor_scale_inv.data<float>()
                                  : fp8::nvfp4_tensor_decode(std::bit_cast<float>(amax.load()));
  if (nvfp4_tensor) *q.tensor_scale_inv.data<float>() = tensor_decode;
  const float pow2_margin = static_cast<float>(std::ldexp(1.0, static_cast<int>(o.margin)));
  const bool divide = fp8::block_scale(o.rule, o.element, 1.0f, pow2_margin, nvfp4_tensor, tensor_decode).divide;
  const CastRun run = pick_run(o.element, divide, o.stochastic);
  std::atomic<int64_t> overflow{0}, underflow{0};
  parallel_for(
      tile_rows, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(br * cols, 1)), [&](int64_t t0, int64_t t1) {
        fp8::ElementStats stats;
        uint32_t chunk_amax = 0;
        std::vector<uint32_t> tile_amax(static_cast<size_t>(tile_cols));
        std::vector<float> factors(static_cast<size_t>(cols));
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t r_begin = t * br, r_end = std::min(rows, r_begin + br);
          std::fill(tile_amax.begin(), tile_amax.end(), 0u);
          for (int64_t r = r_begin; r < r_end; ++r) {
            const float* xr = px + r * cols;
            if (bc == 1) {
              for (int64_t c = 0; c < cols; ++c)
                tile_amax[c] = std::max(tile_amax[c], fp8::abs_bits(std::bit_cast<uint32_t>(xr[c])));
            } else {
              for (int64_t u = 0; u < tile_cols; ++u)
                tile_amax[u] = std::max(tile_amax[u], amax_run(xr + u * bc, std::min(bc, cols - u * bc)));
            }
          }
          for (int64_t u = 0; u < tile_cols; ++u) {
            chunk_amax = std::max(chunk_amax, tile_amax[u]);
            const fp8::BlockScale s = fp8::block_scale(o.rule, o.element, std::bit_cast<float>(tile_amax[u]),
                                                       pow2_margin, nvfp4_tensor, tensor_decode);
            scale_inv[t * tile_cols + u] = s.dequant;
            if (scale_bits != nullptr) scale_bits[t * tile_cols + u] = static_cast<int32_t>(s.stored);
            std::fill(factors.begin() + u * bc, factors.begin() + std::min(cols, (u + 1) * bc), divide ? s.div : s.mul);
          }
          for (int64_t r = r_begin; r < r_end; ++r)
            run(px + r * cols, cols, factors.data(), o.overflow, o.seed, o.offset, static_cast<uint64_t>(r * cols),
                out + r * cols, stats);
        }
        if (!amax_first) fold_amax(chunk_amax);
        overflow.fetch_add(stats.overflow, std::memory_order_relaxed);
        underflow.fetch_add(stats.underflow, std::memory_order_relaxed);
      });
  *q.amax.data<float>() = std::bit_cast<float>(amax.load());
  *q.overflow.data<int64_t>() = overflow.load();
  *q.underflow.data<int64_t>() = underflow.load();
}

// The Sylvester Hadamard transform of 16 values in place, unnormalized: the butterflies in a fixed order (the CUDA
// kernel runs the same sequence per row, so the f32 results are the same bits).
inline void fwht16(float* v) {
  for (int h = 1; h < 16; h <<= 1) {
    for (int i = 0; i < 16; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
}

void cpu_hadamard16(const Tensor& x_in, const Tensor& signs, const Tensor& out) {
  const Tensor x = x_in.dtype() == DType::kF32 ? x_in : x_in.to(DType::kF32);
  const int64_t rows = x.size(0), cols = x.size(1), full = cols / 16 * 16;
  const float* px = x.data<float>();
  const float* s = signs.data<float>();
  float* po = out.data<float>();
  parallel_for(rows, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * cols;
      float* o = po + r * cols;
      for (int64_t c = 0; c < full; c += 16) {
        float v[16];
        for (int j = 0; j < 16; ++j) v[j] = xr[c + j] * s[j];
        fwht16(v);
        for (int j = 0; j < 16; ++j) o[c + j] = v[j] * 0.25f;
      }
      std::copy(xr + full, xr + cols, o + full);
    }
  });
}

constexpr DeviceKernels<void(const Tensor&, const BlockQuantOptions&, const BlockQuantized&)> kQuantizeBlocks{
    .cpu = &cpu_quantize_blocks, .cuda = MT_CUDA_KERNEL(cuda_quantize_blocks)};
constexpr DeviceKernels<void(const Tensor&, const Tensor&, const Tensor&)> kHadamard16{
    .cpu = &cpu_hadamard16, .cuda = MT_CUDA_KERNEL(cuda_hadamard16)};
constexpr DeviceKernels<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, bool, const Tensor&,
                             const Tensor&, const Tensor&)>
    kBlockScaledMm{.cpu = &cpu_block_scaled_mm, .cuda = MT_CUDA_KERNEL(cuda_block_scaled_mm)};

void check_input(std::string_view op, const Tensor& x) {
  MT_CHECK(x.defined(), op, ": the input is an undefined tensor");
  MT_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kF16 || x.dtype() == DType::kBF16, op,
           ": expected an f32, f16 or bf16 input, got ", dtype_name(x.dtype()), " ", shape_str(x.shape()));
  MT_CHECK(x.dim() == 2, op, ": expected a 2-D input [rows, cols], got ", shape_str(x.shape()),
           ". HINT: fold the leading dims into the rows with .reshape({-1, cols})");
}

}  // namespace

BlockQuantized quantize_blocks(const Tensor& x_in, const BlockQuantOptions& options) {
  const Tensor x = detached(amp::cast_input(ops::quantize_blocks, x_in));
  check_input("quantize_blocks", x);
  BlockQuantOptions o = options;
  if (o.block_cols == 0) o.block_cols = std::max<int64_t>(x.size(1), 1);
  MT_CHECK(o.block_rows >= 1 && o.block_cols >= 1, "quantize_blocks: block_rows and block_cols must be at least 1 ",
           "(block_cols 0: whole rows), got ", options.block_rows, " x ", options.block_cols);
  MT_CHECK(o.margin >= 0 && o.margin <= 64, "quantize_blocks: margin ", o.margin, " is outside 0 to 64");
  const bool fp4 = o.element == BlockElement::kE2M1;
  const bool mx = o.rule == BlockScaleRule::kE8M0 || o.rule == BlockScaleRule::kE8M0Rceil;
  if (mx || o.rule == BlockScaleRule::kNvfp4) o.overflow = Fp8Overflow::kSaturate;
  MT_CHECK(o.rule != BlockScaleRule::kNvfp4 || fp4, "quantize_blocks: the NVFP4 scale rule takes E2M1 elements, got ",
           element_name(o.element));
  MT_CHECK(!fp4 || o.rule == BlockScaleRule::kNvfp4 || mx,
           "quantize_blocks: E2M1 elements take an E8M0 (MXFP4) or the NVFP4 scale rule, got the ", rule_name(o.rule),
           " rule");
  MT_CHECK(!o.stochastic || fp4, "quantize_blocks: stochastic rounding is for E2M1 elements, got ",
           element_name(o.element));
  if (o.tensor_scale_inv.defined()) {
    MT_CHECK(o.rule == BlockScaleRule::kNvfp4 && o.tensor_scale, "quantize_blocks: a given tensor_scale_inv is ",
             "NVFP4's per-tensor scale; this cast has no per-tensor scale (rule ", rule_name(o.rule), ")");
    MT_CHECK(o.tensor_scale_inv.dtype() == DType::kF32 && o.tensor_scale_inv.dim() == 0 &&
                 o.tensor_scale_inv.device() == x.device(),
             "quantize_blocks: expected tensor_scale_inv as a 0-d f32 tensor on ", x.device().str(), ", got ",
             dtype_name(o.tensor_scale_inv.dtype()), " ", shape_str(o.tensor_scale_inv.shape()), " on ",
             o.tensor_scale_inv.device().str());
    o.tensor_scale_inv = detached(o.tensor_scale_inv);
  }
  const Device device = x.device();
  kernel_for("quantize_blocks", kQuantizeBlocks, device);
  const int64_t tr = (x.size(0) + o.block_rows - 1) / o.block_rows, tc = (x.size(1) + o.block_cols - 1) / o.block_cols;
  const TensorOptions f32{.device = device}, i64{.dtype = DType::kI64, .device = device};
  const bool stored = mx || o.rule == BlockScaleRule::kNvfp4;
  BlockQuantized q{
      .data = empty(x.shape(),
                    {.dtype = o.element == BlockElement::kE5M2 ? DType::kF8E5M2 : DType::kF8E4M3, .device = device}),
      .scale_inv = empty({tr, tc}, f32),
      .scale_bits = stored ? empty({tr, tc}, {.dtype = DType::kI32, .device = device}) : Tensor(),
      .tensor_scale_inv = o.rule == BlockScaleRule::kNvfp4 && o.tensor_scale ? empty({}, f32) : Tensor(),
      .amax = empty({}, f32),
      .overflow = empty({}, i64),
      .underflow = empty({}, i64)};
  dispatch("quantize_blocks", kQuantizeBlocks, device, x.contiguous(), o, q);
  return q;
}

Tensor dequantize_blocks(const BlockQuantized& q, int64_t block_rows, int64_t block_cols) {
  MT_CHECK(q.data.defined() && is_float8(q.data.dtype()) && q.data.dim() == 2 && q.scale_inv.defined(),
           "dequantize_blocks: expected quantize_blocks' result (2-D FP8 data and its scales)");
  const int64_t rows = q.data.size(0), cols = q.data.size(1);
  if (block_cols == 0) block_cols = std::max<int64_t>(cols, 1);
  MT_CHECK(block_rows >= 1 && block_cols >= 1 && q.scale_inv.dim() == 2 &&
               q.scale_inv.size(0) == (rows + block_rows - 1) / block_rows &&
               q.scale_inv.size(1) == (cols + block_cols - 1) / block_cols,
           "dequantize_blocks: scales ", shape_str(q.scale_inv.shape()), " do not tile ", shape_str(q.data.shape()),
           " in ", block_rows, " x ", block_cols, " blocks");
  // Every step is a tensor op, so this runs on either device: the values, times each element's tile scale.
  const Tensor values = q.data.to(DType::kF32);
  const int64_t tr = q.scale_inv.size(0), tc = q.scale_inv.size(1);
  const Tensor scales = q.scale_inv.reshape({tr, 1, tc, 1})
                            .expand({tr, block_rows, tc, block_cols})
                            .contiguous()
                            .reshape({tr * block_rows, tc * block_cols})
                            .slice(0, 0, rows)
                            .slice(1, 0, cols);
  // NVFP4: each element times (P * its block's scale), P * scale rounded first, as torchao's dequantize.
  return values * (q.tensor_scale_inv.defined() ? scales * q.tensor_scale_inv : scales);
}

Tensor hadamard16(const Tensor& x_in, const Tensor& signs_in) {
  const Tensor x = detached(amp::cast_input(ops::hadamard16, x_in)), signs = detached(signs_in);
  check_input("hadamard16", x);
  MT_CHECK(signs.defined() && signs.dtype() == DType::kF32 && signs.dim() == 1 && signs.size(0) == 16,
           "hadamard16: expected signs as a [16] f32 tensor, got ",
           signs.defined() ? std::string(dtype_name(signs.dtype())) + " " + shape_str(signs.shape())
                           : std::string("an undefined tensor"),
           ". HINT: hadamard16_signs(seed)");
  MT_CHECK(signs.device() == x.device(), "hadamard16: signs on ", signs.device().str(), ", x on ", x.device().str());
  kernel_for("hadamard16", kHadamard16, x.device());
  Tensor out = empty(x.shape(), {.device = x.device()});
  dispatch("hadamard16", kHadamard16, x.device(), x.contiguous(), signs.contiguous(), out);
  return out;
}

Tensor hadamard16_signs(uint64_t seed) {
  Tensor s = empty({16});
  float* p = s.data<float>();
  for (int j = 0; j < 16; ++j)
    p[j] = (fp8::rounding_bits(seed, 0, static_cast<uint64_t>(j)) >> 31) != 0u ? -1.0f : 1.0f;
  return s;
}

Tensor block_scaled_mm(const Tensor& a_in, const Tensor& b_in, const Tensor& scale_a_in, const Tensor& scale_b_in,
                       const BlockScaledMmOptions& o) {
  const Tensor a = detached(a_in), b = detached(b_in), sa = detached(scale_a_in), sb = detached(scale_b_in),
               alpha = detached(o.alpha), bias = detached(o.bias);
  for (const auto& [name, t] : {std::pair{"a", &a}, std::pair{"b", &b}}) {
    MT_CHECK(t->defined() && is_float8(t->dtype()) && t->dim() == 2, "block_scaled_mm: expected a 2-D FP8 ", name,
             ", got ", t->defined() ? std::string(dtype_name(t->dtype())) + " " + shape_str(t->shape()) : "undefined");
  }
  MT_CHECK(!(a.dtype() == DType::kF8E5M2 && b.dtype() == DType::kF8E5M2),
           "block_scaled_mm: a and b are both f8e5m2 (no hardware multiplies E5M2 by E5M2). HINT: quantize one "
           "operand to E4M3");
  MT_CHECK(!o.e2m1 || (a.dtype() == DType::kF8E4M3 && b.dtype() == DType::kF8E4M3),
           "block_scaled_mm: e2m1 says a and b hold E2M1 values, which are stored as f8e4m3 bytes; got a ",
           dtype_name(a.dtype()), " and b ", dtype_name(b.dtype()));
  MT_CHECK(a.size(1) == b.size(0), "block_scaled_mm: cannot multiply a ", shape_str(a.shape()), " by b ",
           shape_str(b.shape()));
  MT_CHECK(o.block_k >= 1, "block_scaled_mm: block_k must be at least 1, got ", o.block_k);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1), blocks = (k + o.block_k - 1) / o.block_k;
  const Device device = a.device();
  for (const Tensor* t : {&b, &sa, &sb, &alpha, &bias})
    MT_CHECK(!t->defined() || t->device() == device, "block_scaled_mm: every tensor must be on ", device.str(),
             " with a; one is on ", t->device().str());
  MT_CHECK(sa.defined() && sa.dtype() == DType::kF32 && sa.dim() == 2 && sa.size(0) == m && sa.size(1) == blocks,
           "block_scaled_mm: expected scale_a f32 [", m, ", ", blocks, "] (one per row and ", o.block_k,
           "-wide block of K = ", k, "), got ",
           sa.defined() ? std::string(dtype_name(sa.dtype())) + " " + shape_str(sa.shape()) : "undefined");
  const int64_t square = (n + o.block_k - 1) / o.block_k;
  MT_CHECK(sb.defined() && sb.dtype() == DType::kF32 && sb.dim() == 2 && sb.size(0) == blocks &&
               (sb.size(1) == n || sb.size(1) == square),
           "block_scaled_mm: expected scale_b f32 [", blocks, ", ", n, "] (per column) or [", blocks, ", ", square,
           "] (", o.block_k, "x", o.block_k, " blocks), got ",
           sb.defined() ? std::string(dtype_name(sb.dtype())) + " " + shape_str(sb.shape()) : "undefined");
  MT_CHECK(!alpha.defined() || (alpha.dtype() == DType::kF32 && alpha.dim() == 0),
           "block_scaled_mm: expected alpha as a 0-d f32 tensor, got ", dtype_name(alpha.dtype()), " ",
           shape_str(alpha.shape()));
  MT_CHECK(o.out_dtype == DType::kF32 || o.out_dtype == DType::kBF16 || o.out_dtype == DType::kF16,
           "block_scaled_mm: expected out_dtype f32, bf16 or f16, got ", dtype_name(o.out_dtype));
  MT_CHECK(!bias.defined() ||
               (bias.dim() == 1 && bias.size(0) == n && (bias.dtype() == DType::kF32 || bias.dtype() == o.out_dtype)),
           "block_scaled_mm: expected a bias [", n, "] in f32 or ", dtype_name(o.out_dtype), ", got ",
           dtype_name(bias.dtype()), " ", shape_str(bias.shape()));
  kernel_for("block_scaled_mm", kBlockScaledMm, device);
  Tensor out = empty({m, n}, {.dtype = o.out_dtype, .device = device});
  dispatch("block_scaled_mm", kBlockScaledMm, device, a, b, sa, sb, o.block_k, o.e2m1, alpha, bias, out);
  return out;
}

}  // namespace mantissa

// Typed entries of the FP8 ops (ops/fp8/fp8.h): argument checks, the kernels per device (ops/fp8/fp8_cpu.h,
// ops/fp8/fp8_cuda.h) and the CPU emulation of the scaled matmul; and this thread's LinearOverride.
#include "ops/fp8/fp8.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <vector>

#include "framework/device_kernels.h"
#include "framework/parallel.h"
#include "ops/autocast.h"
#include "ops/fp8/accumulator.h"
#include "ops/fp8/blocks_kernels.h"
#include "ops/fp8/fp8_cpu.h"
#include "ops/fp8/fp8_cuda.h"
#include "ops/fp8/fp8_math.h"
#include "ops/matmul/gemm_cpu.h"

namespace mantissa {
namespace {

// The input types quantize_fp8 and amax take: f32, f16, bf16.
template <typename F>
decltype(auto) dispatch_quantizable(DType d, F&& f) {
  switch (d) {
    case DType::kF32: return f.template operator()<float>();
    case DType::kF16: return f.template operator()<Half>();
    case DType::kBF16: return f.template operator()<BFloat16>();
    default: break;
  }
  MT_ASSERT(false, "FP8 kernel called with an unchecked dtype ", dtype_name(d));
  return f.template operator()<float>();  // not reached
}

uint8_t* bytes_of(const Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }

float fp8_max_of(DType fp8) { return fp8 == DType::kF8E4M3 ? Float8E4M3::kMax : Float8E5M2::kMax; }
// 2^margin as the f32 the scale is divided by (exact for the margins allowed, 0 to 64).
float pow2_margin(int64_t margin) { return static_cast<float>(std::ldexp(1.0, static_cast<int>(margin))); }

// The ops record no autograd history: they run on detached handles (an undefined one stays undefined, for
// the argument checks to name).
Tensor detached(const Tensor& t) { return t.defined() ? t.detach() : t; }

// ---- CPU kernels over Tensors (the signatures of ops/fp8/fp8_cuda.h) ----

void cpu_quantize_fp8(const Tensor& x, const Tensor& scale, Fp8Overflow overflow, const Tensor& data,
                      const Tensor& amax, const Tensor& count, const Tensor& underflow) {
  const cpu::Fp8PassStats stats = dispatch_quantizable(x.dtype(), [&]<typename T>() {
    return cpu::quantize_fp8<T>(x.data<T>(), x.numel(), *scale.data<float>(), data.dtype(), overflow, bytes_of(data));
  });
  *amax.data<float>() = std::bit_cast<float>(stats.amax_bits);
  *count.data<int64_t>() = stats.overflow;
  *underflow.data<int64_t>() = stats.underflow;
}

// The folded cast (ops/fp8/fp8.h's Fp8CastOptions): the dynamic scale from an amax sweep when no scale is given,
// the quantize sweep, then the state's two updates, each the arithmetic of the ops it replaces.
void cpu_quantize_fp8_into(const Tensor& x, const Fp8CastOptions& o, const Tensor& data, const Tensor& scale,
                           const Tensor& scale_inv) {
  const cpu::Fp8PassStats stats = dispatch_quantizable(x.dtype(), [&]<typename T>() {
    if (!o.scale.defined()) {
      const float amax = std::bit_cast<float>(cpu::amax_bits<T>(x.data<T>(), x.numel()));
      const float s = fp8::dynamic_scale(amax, fp8_max_of(o.fp8), pow2_margin(o.margin));
      *scale.data<float>() = s;
      *scale_inv.data<float>() = fp8::reciprocal(s);
    }
    return cpu::quantize_fp8<T>(x.data<T>(), x.numel(), *scale.data<float>(), o.fp8, o.overflow, bytes_of(data));
  });
  if (o.amax_into.defined()) {
    float* entry = o.amax_into.data<float>();
    *entry = fp8::fold_amax(*entry, std::bit_cast<float>(stats.amax_bits));
  }
  if (o.overflow_into.defined()) {
    double* total = o.overflow_into.data<double>();
    *total = *total + static_cast<double>(stats.overflow);
  }
  if (o.underflow_into.defined()) {
    double* total = o.underflow_into.data<double>();
    *total = *total + static_cast<double>(stats.underflow);
  }
}

void cpu_amax(const Tensor& x, const Tensor& out) {
  const uint32_t bits =
      dispatch_quantizable(x.dtype(), [&]<typename T>() { return cpu::amax_bits<T>(x.data<T>(), x.numel()); });
  *out.data<float>() = std::bit_cast<float>(bits);
}

// An FP8 operand decoded exactly to bf16 for the GEMM, in the layout it is stored in (as ops/matmul/matmul.cc hands a
// matrix to the GEMM: a transposed view goes in as a transpose flag).
struct DecodedOperand {
  Tensor values;  // dense bf16: [rows, cols] as stored
  cpu::Trans trans = cpu::Trans::kNo;
  int64_t ld = 1;
};

DecodedOperand decode_operand(const Tensor& x) {
  const int64_t r = x.size(0), c = x.size(1), s0 = x.stride(0), s1 = x.stride(1);
  DecodedOperand d;
  if (c <= 1 || s1 == 1) {  // row-major
    d.values = empty({r, c}, {.dtype = DType::kBF16});
    cpu::decode_fp8(bytes_of(x), r, c, s0, 1, x.dtype(), d.values.data<BFloat16>());
    d.ld = std::max<int64_t>(c, 1);
  } else if (r <= 1 || s0 == 1) {  // column-major: the transpose of a row-major [c, r]
    d.values = empty({c, r}, {.dtype = DType::kBF16});
    cpu::decode_fp8(bytes_of(x), c, r, s1, 1, x.dtype(), d.values.data<BFloat16>());
    d.trans = cpu::Trans::kYes;
    d.ld = std::max<int64_t>(r, 1);
  } else {  // any other strides: gathered into row-major
    d.values = empty({r, c}, {.dtype = DType::kBF16});
    cpu::decode_fp8(bytes_of(x), r, c, s0, s1, x.dtype(), d.values.data<BFloat16>());
    d.ld = std::max<int64_t>(c, 1);
  }
  return d;
}

// Decode to bf16 (exact), the bf16 GEMM into an f32 accumulator (out itself when out is f32): a CPU has no FP8
// arithmetic, but the products of two FP8 values are exact in f32 and AMX / AVX512_BF16 multiply bf16 pairs
// into f32, so this gives exact products summed in full f32 at the bf16 GEMM's speed. That is not an FP8
// tensor core's arithmetic: Hopper's keeps about 14 bits of the running sum (DeepSeek-V3's report), so this
// is the best case of FP8 accuracy. Then the epilogue in f32 with one rounding to out's dtype. bias is f32 or
// out's dtype, or undefined.
enum class ScaleLayout : uint8_t { kTensor, kRow, kBlock };
void check_scale(std::string_view op, const char* what, const Tensor& s, Device device);

// The scales' shapes say the recipe, as torch._scaled_mm reads them: both 0-d (per tensor); a [M] or [M, 1]
// and b [N] or [1, N] (rowwise: torchao's); a [M, K/128] and b [K/128, ceil(N/128)] (DeepSeek-V3's 1x128
// activations and 128x128 weights) or [K/128, N] (1x128 on both, as the weight gradient takes them). Checked
// here: f32, on the operands' device, and K a multiple of 128 for blocks (no ragged tail: the last block
// would have no scale of its own in cuBLASLt's layout either).
ScaleLayout scale_layout(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb) {
  MT_CHECK(sa.defined() && sb.defined(), "scaled_mm: scale_inv_a or scale_inv_b is an undefined tensor");
  if (sa.dim() == 0 && sb.dim() == 0) {
    check_scale("scaled_mm", "scale_inv_a", sa, a.device());
    check_scale("scaled_mm", "scale_inv_b", sb, a.device());
    return ScaleLayout::kTensor;
  }
  for (const auto& [name, s] : {std::pair{"scale_inv_a", &sa}, std::pair{"scale_inv_b", &sb}}) {
    MT_CHECK(s->dtype() == DType::kF32, "scaled_mm: expected ", name, " in f32, got ", dtype_name(s->dtype()),
             ". HINT: cast it with .to(kF32)");
    MT_CHECK(s->device() == a.device(), "scaled_mm: expected ", name, " on ", a.device().str(),
             " with the operands, got ", s->device().str());
  }
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1), kb = (k + 127) / 128;
  const bool a_rows = sa.numel() == m && (sa.dim() == 1 || (sa.dim() == 2 && sa.size(1) == 1));
  const bool b_cols = sb.numel() == n && (sb.dim() == 1 || (sb.dim() == 2 && sb.size(0) == 1));
  if (a_rows && b_cols) return ScaleLayout::kRow;  // with K <= 128 the same as one block
  const bool a_blocks = sa.dim() == 2 && sa.size(0) == m && sa.size(1) == kb;
  const bool b_blocks = sb.dim() == 2 && sb.size(0) == kb && (sb.size(1) == (n + 127) / 128 || sb.size(1) == n);
  if (a_blocks && b_blocks) {
    MT_CHECK(k % 128 == 0, "scaled_mm: block scales need K a multiple of 128 (one scale per 128 of K), got K = ", k,
             ". HINT: pad K to ", kb * 128, " with zeros, or use rowwise or per-tensor scales");
    return ScaleLayout::kBlock;
  }
  MT_THROW("scaled_mm: scale_inv_a ", shape_str(sa.shape()), " and scale_inv_b ", shape_str(sb.shape()),
           " fit no scaling for a ", shape_str(a.shape()), " by ", shape_str(b.shape()),
           " product: per tensor both 0-d; rowwise a [", m, "] or [", m, ", 1] and b [", n, "] or [1, ", n,
           "]; blocks a [", m, ", ", kb, "] (1x128) and b [", kb, ", ", (n + 127) / 128, "] (128x128) or [", kb, ", ",
           n, "] (1x128)");
}

// The product of K's columns [l0, l0 + width) into the dense f32 c [m, n]: the tensor-core model on the FP8
// bytes, or the bf16 GEMM on the decoded operands.
void block_product(const Tensor& a, const Tensor& b, const DecodedOperand& da, const DecodedOperand& db,
                   const Fp8Accumulator& model, int64_t l0, int64_t width, float* c) {
  const int64_t m = a.size(0), n = b.size(1);
  if (model.kind == Fp8Accumulation::kTensorCore) {
    cpu::tensor_core_gemm(bytes_of(a) + l0 * a.stride(1), a.stride(0), a.stride(1), a.dtype(),
                          bytes_of(b) + l0 * b.stride(0), b.stride(0), b.stride(1), b.dtype(), m, n, width, model, c);
    return;
  }
  const BFloat16* pa = da.values.data<BFloat16>() + (da.trans == cpu::Trans::kYes ? l0 * da.ld : l0);
  const BFloat16* pb = db.values.data<BFloat16>() + (db.trans == cpu::Trans::kYes ? l0 : l0 * db.ld);
  cpu::gemm(cpu::GemmArgs<BFloat16, float>{.trans_a = da.trans,
                                           .trans_b = db.trans,
                                           .m = m,
                                           .n = n,
                                           .k = width,
                                           .a = pa,
                                           .lda = da.ld,
                                           .b = pb,
                                           .ldb = db.ld,
                                           .c = c,
                                           .ldc = n,
                                           .alpha = 1.0,
                                           .beta = 0.0});
}

// Whether v times any FP8 value is exact in bf16: v has at most 4 significant bits (an E8M0 power of two, an E4M3
// value: NVFP4's block scales) and an exponent far from bf16's range limits, or is 0. An FP8 value has at most 4,
// so the product has at most 8: bf16's precision.
bool folds_exactly(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v), exponent = (bits >> 23) & 0xffu;
  if ((bits & 0x7fffffffu) == 0u) return true;
  return (bits & 0x000fffffu) == 0u && exponent >= 127u - 100u && exponent <= 127u + 100u;
}

// The FP8 matrix x [rows, cols] (any strides) times its scales, exactly, into a dense row-major bf16 matrix:
// element (i, l) times the scale row_scales(i) fills for row i (a vector of cols; rows that share their
// scales are filled once: row_key(i) says which).
template <typename RowKey, typename RowScales>
Tensor decode_scaled(const Tensor& x, RowKey&& row_key, RowScales&& row_scales) {
  const int64_t rows = x.size(0), cols = x.size(1), s0 = x.stride(0), s1 = x.stride(1);
  Tensor out = empty({rows, cols}, {.dtype = DType::kBF16});
  const uint8_t* src = bytes_of(x);
  BFloat16* dst = out.data<BFloat16>();
  // The format's 256 values, decoded once.
  std::array<float, 256> table;
  for (int v = 0; v < 256; ++v) {
    const auto byte = static_cast<uint8_t>(v);
    table[static_cast<size_t>(v)] = std::bit_cast<float>(
        x.dtype() == DType::kF8E4M3 ? Fp8E4M3Format::to_f32_bits(byte) : Fp8E5M2Format::to_f32_bits(byte));
  }
  constexpr int64_t kTile = 16;  // rows decoded together: a transposed operand is read along its columns
  parallel_for(rows, std::max<int64_t>(kTile, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
    std::vector<float> scales(static_cast<size_t>(cols)), values(static_cast<size_t>(kTile * cols));
    int64_t filled = -1;
    for (int64_t i0 = begin; i0 < end; i0 += kTile) {
      const int64_t i1 = std::min(end, i0 + kTile);
      if (s1 == 1) {
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t l = 0; l < cols; ++l) values[(i - i0) * cols + l] = table[src[i * s0 + l]];
      } else {
        for (int64_t l = 0; l < cols; ++l)
          for (int64_t i = i0; i < i1; ++i) values[(i - i0) * cols + l] = table[src[i * s0 + l * s1]];
      }
      for (int64_t i = i0; i < i1; ++i) {
        if (const int64_t key = row_key(i); key != filled) {
          row_scales(i, scales.data());
          filled = key;
        }
        // Exact (folds_exactly): the bf16 is the f32's upper half.
        const float* v = &values[(i - i0) * cols];
        uint16_t* d = reinterpret_cast<uint16_t*>(dst + i * cols);
        for (int64_t l = 0; l < cols; ++l)
          d[l] = static_cast<uint16_t>(std::bit_cast<uint32_t>(v[l] * scales[l]) >> 16);
      }
    }
  });
  return out;
}

// Block scales: each block_k-wide block of K (the last one may be shorter) summed on its own (for the tensor-core
// model, one promotion interval), times its two scales, the blocks summed in f32 in K's order; what the H200's
// cuBLASLt computed for 128-wide blocks (bench/gpu/2026-11-28, bf16 outputs bit for bit). sb holds a scale per
// column ([blocks, n]) or per block_k columns ([blocks, ceil(n / block_k)]).
// With the f32 model and scales that fold into the operands exactly (E8M0 powers of two, NVFP4's E4M3 block
// scales: folds_exactly), the operands are scaled first and one GEMM sums all K exact products in f32: the same
// sum in another order, one GEMM instead of one per block (a 16-wide block would otherwise cost K / 16 GEMMs).
void block_scaled_sum(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, int64_t block_k,
                      const Fp8Accumulator& model, float* total) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1), blocks = (k + block_k - 1) / block_k;
  const Tensor sa_c = sa.contiguous(), sb_c = sb.contiguous();
  const float *pa = sa_c.data<float>(), *pb = sb_c.data<float>();
  const int64_t b_cols = sb.size(1);
  const bool b_per_column = b_cols == n && n != (n + block_k - 1) / block_k;
  const bool tc = model.kind == Fp8Accumulation::kTensorCore;
  if (!tc && blocks > 1 && std::all_of(pa, pa + sa.numel(), folds_exactly) &&
      std::all_of(pb, pb + sb.numel(), folds_exactly)) {
    const Tensor af = decode_scaled(
        a, [](int64_t i) { return i; },
        [&](int64_t i, float* s) {
          for (int64_t blk = 0; blk < blocks; ++blk)
            std::fill(s + blk * block_k, s + std::min(k, (blk + 1) * block_k), pa[i * blocks + blk]);
        });
    const Tensor bf = decode_scaled(
        b, [&](int64_t l) { return l / block_k; },
        [&](int64_t l, float* s) {
          const float* row = pb + (l / block_k) * b_cols;
          if (b_per_column) {
            std::copy(row, row + n, s);
          } else {
            for (int64_t u = 0; u < b_cols; ++u) std::fill(s + u * block_k, s + std::min(n, (u + 1) * block_k), row[u]);
          }
        });
    cpu::gemm(cpu::GemmArgs<BFloat16, float>{.m = m,
                                             .n = n,
                                             .k = k,
                                             .a = af.data<BFloat16>(),
                                             .lda = std::max<int64_t>(k, 1),
                                             .b = bf.data<BFloat16>(),
                                             .ldb = std::max<int64_t>(n, 1),
                                             .c = total,
                                             .ldc = n,
                                             .alpha = 1.0,
                                             .beta = 0.0});
    return;
  }
  const DecodedOperand da = tc ? DecodedOperand{} : decode_operand(a), db = tc ? DecodedOperand{} : decode_operand(b);
  std::vector<float> part(static_cast<size_t>(blocks > 1 ? m * n : 0));
  std::vector<float> col_scale(static_cast<size_t>(n));
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t l0 = blk * block_k;
    // The first block's sum goes straight into the total, to be scaled in place.
    float* sum = blk == 0 ? total : part.data();
    block_product(a, b, da, db, model, l0, std::min(block_k, k - l0), sum);
    for (int64_t j = 0; j < n; ++j) col_scale[j] = pb[blk * b_cols + (b_per_column ? j : j / block_k)];
    // Each block's sum joins the running total in one fma, from zero (a -0 product gives +0). The scales: their
    // product, fma(p, sa * sb, t); but the tensor-core model with per-column B scales (1x128 x 1x128) follows the
    // H200, fma(p * sa, sb, t) (bench/gpu/2026-11-28-run3: 12288 of 12288 f32 outputs; the 128x128 B blocks matched
    // the first form bit for bit in run 2).
    const bool row_first = tc && b_per_column;
    parallel_for(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float s_row = pa[i * blocks + blk];
        const float* __restrict cs = col_scale.data();
        const float* p = sum + i * n;  // the total itself for the first block
        float* t = total + i * n;
        const bool first = blk == 0;
        if (row_first) {
          for (int64_t j = 0; j < n; ++j) t[j] = std::fma(p[j] * s_row, cs[j], first ? 0.0f : t[j]);
        } else {
          for (int64_t j = 0; j < n; ++j) t[j] = std::fma(p[j], s_row * cs[j], first ? 0.0f : t[j]);
        }
      }
    });
  }
}

// The epilogue of every CPU scaled GEMM: out = epilogue(acc, scale or row[i] * col[j], bias[j]) rounded once to
// out's dtype.
void epilogue_into(const Tensor& acc, float scale, cpu::RowColScales rc, const Tensor& bias, const Tensor& out) {
  const int64_t m = out.size(0), n = out.size(1);
  const Tensor bias32 = bias.defined() ? bias.to(DType::kF32).contiguous() : Tensor();
  const float* bias_ptr = bias32.defined() ? bias32.data<float>() : nullptr;
  switch (out.dtype()) {
    case DType::kF32:
      return cpu::scaled_mm_epilogue<float>(acc.data<float>(), m, n, scale, bias_ptr, out.data<float>(), rc);
    case DType::kBF16:
      return cpu::scaled_mm_epilogue<BFloat16>(acc.data<float>(), m, n, scale, bias_ptr, out.data<BFloat16>(), rc);
    case DType::kF16:
      return cpu::scaled_mm_epilogue<Half>(acc.data<float>(), m, n, scale, bias_ptr, out.data<Half>(), rc);
    default: MT_ASSERT(false, "scaled GEMM kernel called with an unchecked out dtype ", dtype_name(out.dtype()));
  }
}

void cpu_scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_inv_a, const Tensor& scale_inv_b,
                   const Tensor& bias, const Tensor& out) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (m == 0 || n == 0) return;
  const Tensor acc = out.dtype() == DType::kF32 ? out : empty({m, n});
  const Fp8Accumulator model = cpu_fp8_accumulator();
  const ScaleLayout layout = scale_layout(a, b, scale_inv_a, scale_inv_b);
  if (layout == ScaleLayout::kBlock) {
    block_scaled_sum(a, b, scale_inv_a, scale_inv_b, 128, model, acc.data<float>());
  } else if (model.kind == Fp8Accumulation::kTensorCore) {
    // The tensor core's sums, bit for bit (ops/fp8/accumulator.h): about 10x the f32 GEMM, for judging a recipe
    // (bench/fp8_gemm_bench's scaled_mm_e4m3_hopper cases).
    cpu::tensor_core_gemm(bytes_of(a), a.stride(0), a.stride(1), a.dtype(), bytes_of(b), b.stride(0), b.stride(1),
                          b.dtype(), m, n, k, model, acc.data<float>());
  } else {
    const DecodedOperand da = decode_operand(a), db = decode_operand(b);
    block_product(a, b, da, db, model, 0, k, acc.data<float>());
  }
  // Per tensor: acc * (scale_inv_a * scale_inv_b); rowwise: acc * (scale_inv_a[i] * scale_inv_b[j]); blocks:
  // scaled already. Then the bias, one rounding to out's dtype.
  const Tensor row = layout == ScaleLayout::kRow ? scale_inv_a.contiguous() : Tensor();
  const Tensor col = layout == ScaleLayout::kRow ? scale_inv_b.contiguous() : Tensor();
  const float scale = layout == ScaleLayout::kTensor ? *scale_inv_a.data<float>() * *scale_inv_b.data<float>() : 1.0f;
  epilogue_into(
      acc, scale,
      {.row = row.defined() ? row.data<float>() : nullptr, .col = col.defined() ? col.data<float>() : nullptr}, bias,
      out);
}

constexpr DeviceKernels<decltype(cpu_quantize_fp8)> kQuantize{.cpu = &cpu_quantize_fp8,
                                                              .cuda = MT_CUDA_KERNEL(cuda_quantize_fp8)};
constexpr DeviceKernels<decltype(cpu_quantize_fp8_into)> kQuantizeInto{.cpu = &cpu_quantize_fp8_into,
                                                                       .cuda = MT_CUDA_KERNEL(cuda_quantize_fp8_into)};
constexpr DeviceKernels<decltype(cpu_amax)> kAmax{.cpu = &cpu_amax, .cuda = MT_CUDA_KERNEL(cuda_amax)};
constexpr DeviceKernels<decltype(cpu_scaled_mm)> kScaledMm{.cpu = &cpu_scaled_mm,
                                                           .cuda = MT_CUDA_KERNEL(cuda_scaled_mm)};

// ---- argument checks ----

void check_quantizable(std::string_view op, const Tensor& x) {
  MT_CHECK(x.defined(), op, ": the input is an undefined tensor");
  MT_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kF16 || x.dtype() == DType::kBF16, op,
           ": expected an f32, f16 or bf16 input, got ", dtype_name(x.dtype()), " ", shape_str(x.shape()),
           is_float8(x.dtype()) ? ". HINT: it is quantized already; decode it with .to(kF32) first"
                                : ". HINT: convert it with .to(kF32)");
}

// A per-tensor scale (or scale inverse): a 0-d f32 tensor on `device`.
void check_scale(std::string_view op, const char* what, const Tensor& s, Device device) {
  MT_CHECK(s.defined(), op, ": ", what, " is an undefined tensor");
  MT_CHECK(s.dtype() == DType::kF32 && s.dim() == 0, op, ": expected ", what,
           " to be a 0-d f32 tensor (one per-tensor factor), got ", dtype_name(s.dtype()), " ", shape_str(s.shape()),
           ". HINT: make it with scalar_tensor(value, {.device = ...}), or .reshape({}).to(kF32) a one-element tensor");
  MT_CHECK(s.device() == device, op, ": expected ", what, " on ", device.str(), " with the data, got ",
           s.device().str(), ". HINT: keep the scale on the data's device (a device value: reading it needs no sync)");
}

void check_fp8_operand(const char* name, const Tensor& t) {
  MT_CHECK(t.defined(), "scaled_mm: ", name, " is an undefined tensor");
  MT_CHECK(is_float8(t.dtype()), "scaled_mm: expected an FP8 ", name, " (f8e4m3 or f8e5m2), got ",
           dtype_name(t.dtype()), " ", shape_str(t.shape()), ". HINT: quantize it with quantize_fp8 first");
  MT_CHECK(t.dim() == 2, "scaled_mm: expected a 2-D ", name, ", got ", shape_str(t.shape()),
           ". HINT: fold leading dims into the rows with .reshape({-1, k})");
}

}  // namespace

void cpu_block_scaled_mm(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, int64_t block_k,
                         bool /*e2m1: the CPU's sums do not depend on it*/, const Tensor& alpha, const Tensor& bias,
                         const Tensor& out) {
  const int64_t m = a.size(0), n = b.size(1);
  if (m == 0 || n == 0) return;
  const Fp8Accumulator model = cpu_fp8_accumulator();
  MT_CHECK(model.kind != Fp8Accumulation::kTensorCore || block_k == 128,
           "block_scaled_mm: the CPU's accumulator "
           "model is ",
           model.name(), ", which models Hopper's FP8 tensor core: it has no ", block_k,
           "-wide block scaling to model (its block scales are 128 wide). HINT: use the f32 accumulator "
           "(Fp8Accumulator::f32(), --fp8_accumulator=f32) for MX and NVFP4 blocks");
  const Tensor acc = out.dtype() == DType::kF32 ? out : empty({m, n});
  block_scaled_sum(a, b, sa, sb, block_k, model, acc.data<float>());
  epilogue_into(acc, alpha.defined() ? *alpha.data<float>() : 1.0f, {}, bias, out);
}

Fp8Quantized quantize_fp8(const Tensor& x_in, const Tensor& scale_in, DType fp8, Fp8Overflow overflow) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::quantize_fp8, {x_in, scale_in});
  const Tensor x = detached(in[0]), scale = detached(in[1]);
  check_quantizable("quantize_fp8", x);
  MT_CHECK(is_float8(fp8), "quantize_fp8: expected an FP8 target dtype (kF8E4M3 or kF8E5M2), got ", dtype_name(fp8));
  check_scale("quantize_fp8", "scale", scale, x.device());
  kernel_for("quantize_fp8", kQuantize, x.device());
  const TensorOptions on_x{.device = x.device()};
  Fp8Quantized q{.data = empty(x.shape(), {.dtype = fp8, .device = x.device()}),
                 .amax = empty({}, on_x),
                 .overflow = empty({}, {.dtype = DType::kI64, .device = x.device()}),
                 .underflow = empty({}, {.dtype = DType::kI64, .device = x.device()})};
  dispatch("quantize_fp8", kQuantize, x.device(), x.contiguous(), scale, overflow, q.data, q.amax, q.overflow,
           q.underflow);
  return q;
}

Fp8CastResult quantize_fp8(const Tensor& x_in, const Fp8CastOptions& options_in) {
  Fp8CastOptions o = options_in;
  const Tensor x = detached(amp::cast_input(ops::quantize_fp8, x_in));
  check_quantizable("quantize_fp8", x);
  MT_CHECK(is_float8(o.fp8), "quantize_fp8: expected an FP8 target dtype (kF8E4M3 or kF8E5M2), got ",
           dtype_name(o.fp8));
  const bool dynamic = !o.scale.defined();
  if (!dynamic) check_scale("quantize_fp8", "scale", o.scale, x.device());
  MT_CHECK(o.margin >= 0 && o.margin <= 64, "quantize_fp8: margin ", o.margin, " is outside 0 to 64");
  auto check_into = [&](const char* what, const Tensor& t, DType dtype) {
    if (!t.defined()) return;
    MT_CHECK(t.dtype() == dtype && t.dim() == 0 && t.device() == x.device(), "quantize_fp8: expected ", what,
             " to be a 0-d ", dtype_name(dtype), " tensor on ", x.device().str(), ", got ", dtype_name(t.dtype()), " ",
             shape_str(t.shape()), " on ", t.device().str());
  };
  check_into("amax_into", o.amax_into, DType::kF32);
  check_into("overflow_into", o.overflow_into, DType::kF64);
  check_into("underflow_into", o.underflow_into, DType::kF64);
  kernel_for("quantize_fp8", kQuantizeInto, x.device());
  const TensorOptions on_x{.device = x.device()};
  Fp8CastResult r{.data = empty(x.shape(), {.dtype = o.fp8, .device = x.device()}),
                  .scale = dynamic ? empty({}, on_x) : detached(o.scale),
                  .scale_inv = dynamic ? empty({}, on_x) : Tensor()};
  for (Tensor* t : {&o.scale, &o.amax_into, &o.overflow_into, &o.underflow_into}) *t = detached(*t);
  dispatch("quantize_fp8", kQuantizeInto, x.device(), x.contiguous(), o, r.data, r.scale, r.scale_inv);
  return r;
}

Tensor amax(const Tensor& x_in) {
  const Tensor x = detached(amp::cast_input(ops::amax, x_in));
  check_quantizable("amax", x);
  kernel_for("amax", kAmax, x.device());
  Tensor out = empty({}, {.device = x.device()});
  dispatch("amax", kAmax, x.device(), x.contiguous(), out);
  return out;
}

Tensor scaled_mm(const Tensor& a_in, const Tensor& b_in, const Tensor& scale_inv_a_in, const Tensor& scale_inv_b_in,
                 DType out_dtype, const Tensor& bias_in) {
  const std::vector<Tensor> in =
      amp::cast_inputs(ops::scaled_mm, {a_in, b_in, scale_inv_a_in, scale_inv_b_in, bias_in});
  const Tensor a = detached(in[0]), b = detached(in[1]), scale_inv_a = detached(in[2]), scale_inv_b = detached(in[3]),
               bias = detached(in[4]);
  check_fp8_operand("a", a);
  check_fp8_operand("b", b);
  MT_CHECK(!(a.dtype() == DType::kF8E5M2 && b.dtype() == DType::kF8E5M2),
           "scaled_mm: a and b are both f8e5m2: an E5M2 x E5M2 product is not supported (cuBLASLt has no kernel "
           "for it, and PyTorch's _scaled_mm refuses it too). HINT: quantize one operand (the activations or the "
           "weights) to f8e4m3");
  MT_CHECK(a.device() == b.device(), "scaled_mm: expected a and b on one device, got ", a.device().str(), " ",
           shape_str(a.shape()), " and ", b.device().str(), " ", shape_str(b.shape()),
           ". HINT: move both to one device with .to(device)");
  MT_CHECK(a.size(1) == b.size(0), "scaled_mm: cannot multiply a ", shape_str(a.shape()), " by b ",
           shape_str(b.shape()), ": inner sizes ", a.size(1), " and ", b.size(0), " differ");
  const ScaleLayout layout = scale_layout(a, b, scale_inv_a, scale_inv_b);
  MT_CHECK(layout != ScaleLayout::kBlock || a.device().is_cpu(), "scaled_mm: block scales (scale_inv_a ",
           shape_str(scale_inv_a.shape()), ", scale_inv_b ", shape_str(scale_inv_b.shape()),
           ") run on the CPU only; on ", a.device().str(),
           " use block_scaled_mm (ops/fp8/blocks.h), which takes them on both devices");
  MT_CHECK(out_dtype == DType::kF32 || out_dtype == DType::kBF16 || out_dtype == DType::kF16,
           "scaled_mm: expected out_dtype f32, bf16 or f16, got ", dtype_name(out_dtype));
  const int64_t n = b.size(1);
  if (bias.defined()) {
    MT_CHECK(bias.dim() == 1 && bias.size(0) == n, "scaled_mm: expected a 1-D bias [", n,
             "] (one per output column), got ", shape_str(bias.shape()));
    MT_CHECK(bias.dtype() == DType::kF32 || bias.dtype() == out_dtype, "scaled_mm: expected an f32 or ",
             dtype_name(out_dtype), " (out_dtype) bias, got ", dtype_name(bias.dtype()),
             ". HINT: cast it with .to(kF32)");
    MT_CHECK(bias.device() == a.device(), "scaled_mm: expected bias on ", a.device().str(), " with the operands, got ",
             bias.device().str(), ". HINT: move it with .to(device)");
  }
  kernel_for("scaled_mm", kScaledMm, a.device());
  Tensor out = empty({a.size(0), n}, {.dtype = out_dtype, .device = a.device()});
  dispatch("scaled_mm", kScaledMm, a.device(), a, b, scale_inv_a, scale_inv_b, bias, out);
  return out;
}

// ---- the LinearOverride of this thread ----

namespace {
thread_local LinearOverride* t_linear_override = nullptr;
}  // namespace

LinearOverride* linear_override() { return t_linear_override; }

LinearOverride* set_linear_override(LinearOverride* override_) {
  LinearOverride* previous = t_linear_override;
  t_linear_override = override_;
  return previous;
}

Tensor try_linear_override(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  LinearOverride* const installed = t_linear_override;
  if (installed == nullptr) return Tensor();
  // Uninstalled while it runs (ops/fp8/fp8.h), and back afterwards even when it throws.
  struct Reinstall {
    LinearOverride* o;
    ~Reinstall() { t_linear_override = o; }
  } reinstall{installed};
  t_linear_override = nullptr;
  return installed->linear(x, weight, bias);
}

}  // namespace mantissa

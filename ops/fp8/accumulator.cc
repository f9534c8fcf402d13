// The CPU's FP8 accumulator models (ops/fp8/accumulator.h).
#include "ops/fp8/accumulator.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <vector>

#include "framework/error.h"
#include "framework/parallel.h"

namespace mantissa {
namespace {

std::mutex g_mu;
Fp8Accumulator g_model;  // guarded by g_mu

// An FP8 value as sig * 2^(exp - mbits): sig signed, with the hidden bit for normals; exp the unbiased
// exponent, subnormals at the format's minimum. finite is false for inf and nan.
struct Factor {
  int32_t sig = 0, exp = 0, mbits = 0;
  bool finite = true;
};

Factor factor(uint8_t bits, DType fp8) {
  const bool e5m2 = fp8 == DType::kF8E5M2;
  const int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  const int e = e5m2 ? (bits >> 2) & 0x1F : (bits >> 3) & 0xF;
  const int m = bits & (e5m2 ? 0x3 : 0x7);
  Factor f;
  f.mbits = mbits;
  f.finite = e5m2 ? e != 0x1F : !(e == 0xF && m == 0x7);
  const int32_t magnitude = e == 0 ? m : ((1 << mbits) | m);
  f.sig = (bits & 0x80) ? -magnitude : magnitude;
  f.exp = std::max(e, 1) - bias;
  return f;
}

float fp8_value(uint8_t bits, DType fp8) {
  const Factor f = factor(bits, fp8);
  if (!f.finite) {
    const bool e5m2 = fp8 == DType::kF8E5M2;
    if (e5m2 && (bits & 0x3) == 0) return (bits & 0x80) ? -INFINITY : INFINITY;
    return std::numeric_limits<float>::quiet_NaN();
  }
  return std::ldexp(static_cast<float>(f.sig), f.exp - f.mbits);
}

}  // namespace

std::string Fp8Accumulator::name() const {
  if (*this == f32()) return "f32";
  if (*this == hopper(false)) return "hopper";
  if (*this == hopper(true)) return "hopper-fast";
  if (kind == Fp8Accumulation::kF32) return "f32";
  return detail::cat("tensor core (groups of ", group, ", ", retained_bits, " retained bits, promotion every ",
                     promotion_interval, ")");
}

std::optional<Fp8Accumulator> find_fp8_accumulator(std::string_view text) {
  if (text == "f32") return Fp8Accumulator::f32();
  if (text == "hopper") return Fp8Accumulator::hopper(false);
  if (text == "hopper-fast") return Fp8Accumulator::hopper(true);
  return std::nullopt;
}

Fp8Accumulator parse_fp8_accumulator(std::string_view text) {
  if (std::optional<Fp8Accumulator> model = find_fp8_accumulator(text)) return *model;
  MT_THROW("unknown FP8 accumulator '", text,
           "': expected f32 (full f32 sums), hopper (Hopper's FP8 tensor core, promoted to f32 every 128 products) "
           "or hopper-fast (the same with cuBLASLt's fast accumulation: never promoted)");
}

void set_cpu_fp8_accumulator(const Fp8Accumulator& model) {
  if (model.kind == Fp8Accumulation::kTensorCore) {
    MT_CHECK(model.group >= 1, "set_cpu_fp8_accumulator: group must be at least 1, got ", model.group);
    MT_CHECK(model.retained_bits >= 1 && model.retained_bits <= 24,
             "set_cpu_fp8_accumulator: retained_bits must be in 1..24 (an f32 holds 24 significant bits), got ",
             model.retained_bits);
    MT_CHECK(model.promotion_interval >= 0 && model.promotion_interval % model.group == 0,
             "set_cpu_fp8_accumulator: promotion_interval must be 0 (never) or a multiple of the group (", model.group,
             "), got ", model.promotion_interval);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_model = model;
}

Fp8Accumulator cpu_fp8_accumulator() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_model;
}

namespace cpu {
namespace {

// An operand's K values decoded for the dot product: sig (signed, with the hidden bit) and exp (unbiased,
// subnormals at the minimum; kZero for a zero, so that it never sets the anchor).
constexpr int32_t kZero = -100000;

void decode(const uint8_t* x, int64_t stride, DType fp8, int64_t k, int32_t* sig, int32_t* exp, bool* finite) {
  for (int64_t l = 0; l < k; ++l) {
    const Factor f = factor(x[l * stride], fp8);
    *finite = *finite && f.finite;
    sig[l] = f.sig;
    exp[l] = f.sig == 0 ? kZero : f.exp;
  }
}

// The dot product over decoded, finite operands. mbits: the two formats' fraction bits together.
float dot(const int32_t* sa, const int32_t* ea, const int32_t* sb, const int32_t* eb, int64_t k, int mbits,
          const Fp8Accumulator& model) {
  constexpr int kBias = 40;  // units = (|p| << (shift + kBias)) >> kBias: the right shift cuts toward zero
  float total = 0.0f, acc = 0.0f;
  for (int64_t start = 0; start < k; start += model.group) {
    const int64_t end = std::min<int64_t>(k, start + model.group);
    int32_t anchor = kZero;
    for (int64_t l = start; l < end; ++l) anchor = std::max(anchor, ea[l] + eb[l]);
    if (acc != 0.0f) {
      int e = 0;
      std::frexp(acc, &e);
      anchor = std::max(anchor, e - 1);
    }
    if (anchor > kZero / 2) {
      const int32_t q = anchor - model.retained_bits;  // the quantum's exponent
      // A product sa sb 2^(ea + eb - mbits), in quanta 2^q: shifted by ea + eb - mbits - q <= retained_bits.
      const int32_t offset = kBias - mbits - q;
      int64_t sum = 0;
      for (int64_t l = start; l < end; ++l) {
        const int32_t p = sa[l] * sb[l];
        const int32_t shift = std::clamp(ea[l] + eb[l] + offset, 0, 62);
        const int64_t units = (static_cast<int64_t>(p < 0 ? -p : p) << shift) >> kBias;
        sum += p < 0 ? -units : units;
      }
      if (acc != 0.0f) sum += static_cast<int64_t>(std::trunc(std::ldexp(static_cast<double>(acc), -q)));
      // The sum cut toward zero to retained_bits + 1 significant bits, then exact in an f32.
      const uint64_t magnitude = static_cast<uint64_t>(sum < 0 ? -sum : sum);
      const int drop = std::max(0, static_cast<int>(std::bit_width(magnitude)) - (model.retained_bits + 1));
      const int64_t kept = static_cast<int64_t>(magnitude >> drop);
      acc = std::ldexp(static_cast<float>(sum < 0 ? -kept : kept), q + drop);
    }
    if (model.promotion_interval > 0 && (end % model.promotion_interval == 0 || end == k)) {
      total += acc;
      acc = 0.0f;
    }
  }
  return model.promotion_interval > 0 ? total : acc;
}

// inf or nan among the operands: the plain f32 sum carries it, as the hardware's does.
float plain_dot(const uint8_t* a, int64_t a_stride, DType a_fp8, const uint8_t* b, int64_t b_stride, DType b_fp8,
                int64_t k) {
  float s = 0.0f;
  for (int64_t l = 0; l < k; ++l) s += fp8_value(a[l * a_stride], a_fp8) * fp8_value(b[l * b_stride], b_fp8);
  return s;
}

int fraction_bits(DType fp8) { return fp8 == DType::kF8E5M2 ? 2 : 3; }

// ---- the same model in f32 vector arithmetic, many outputs at a time ----
//
// dot() above, rewritten so that a row of outputs runs as f32 vectors: every quantity it takes is exact in an f32
// when a group's sum stays under 2^24 (fits_f32): an FP8 product (at most 4 x 4 significant bits); the anchor as the
// power of two 2^(e_a + e_b), the product of the operands' powers (zero for a zero, which never anchors), or the
// running sum's leading power (its exponent bits); a product in quanta, x * 2^-q, cut toward zero by trunc; their
// sum, an integer under 2^(retained_bits + 2) * (group + 1); the sum cut to retained_bits + 1 significant bits by
// clearing its low fraction bits; the result times 2^q. So it gives dot()'s bits: tests/ops/fp8_accumulator_test.cc.

// An operand's values and powers: value x = sig 2^(e - mbits) and power 2^e (0 for a zero), from a table of the
// format's 256 bytes.
struct ByteTable {
  float value[256], power[256];
  bool finite[256];
};

const ByteTable& byte_table(DType fp8) {
  static const auto make = [](DType t) {
    ByteTable table{};
    for (int v = 0; v < 256; ++v) {
      const Factor f = factor(static_cast<uint8_t>(v), t);
      table.finite[v] = f.finite;
      table.value[v] = f.finite ? std::ldexp(static_cast<float>(f.sig), f.exp - f.mbits) : 0.0f;
      table.power[v] = f.sig == 0 ? 0.0f : std::ldexp(1.0f, f.exp);
    }
    return table;
  };
  static const ByteTable e4m3 = make(DType::kF8E4M3), e5m2 = make(DType::kF8E5M2);
  return fp8 == DType::kF8E5M2 ? e5m2 : e4m3;
}

// Element l goes to value[l * out_stride] and power[l * out_stride].
void decode_values(const uint8_t* x, int64_t stride, DType fp8, int64_t k, float* value, float* power, bool* finite,
                   int64_t out_stride = 1) {
  const ByteTable& t = byte_table(fp8);
  bool all = true;
  for (int64_t l = 0; l < k; ++l) {
    const uint8_t v = x[l * stride];
    all = all && t.finite[v];
    value[l * out_stride] = t.value[v];
    power[l * out_stride] = t.power[v];
  }
  *finite = *finite && all;
}

bool fits_f32(const Fp8Accumulator& model) {
  return model.retained_bits + 2 + std::bit_width(static_cast<uint32_t>(model.group + 1)) <= 24;
}

constexpr int64_t kLanes = 32;  // outputs of a row computed together (sums and factors stay in registers)

// Outputs c[j] for j < width of one row: A's row as (av, ap)[l], B's rows as (bv, bp)[l * ldb + j]. kWidth > 0: a
// whole chunk of that many outputs, a trip count the compiler knows (the sums stay in registers); 0: width.
template <int64_t kWidth>
void row_dots(const float* __restrict av, const float* __restrict ap, const float* __restrict bv,
              const float* __restrict bp, int64_t ldb, int64_t tail, int64_t k, const Fp8Accumulator& model,
              float* __restrict c) {
  const int64_t width = kWidth > 0 ? kWidth : tail;
  const uint32_t cut_mask = ~((uint32_t{1} << (23 - model.retained_bits)) - 1u);  // keeps retained_bits + 1 bits
  const float below = std::ldexp(1.0f, -model.retained_bits), above = std::ldexp(1.0f, model.retained_bits);
  alignas(64) float total[kLanes], acc[kLanes], anchor[kLanes], rq[kLanes], sum[kLanes];
  for (int64_t j = 0; j < width; ++j) total[j] = acc[j] = 0.0f;
  for (int64_t start = 0; start < k; start += model.group) {
    const int64_t end = std::min<int64_t>(k, start + model.group);
    for (int64_t j = 0; j < width; ++j) anchor[j] = std::bit_cast<float>(std::bit_cast<uint32_t>(acc[j]) & 0x7F800000u);
    for (int64_t l = start; l < end; ++l) {
      const float pa = ap[l];
      if (pa == 0.0f) continue;
      const float* __restrict pb = bp + l * ldb;
      for (int64_t j = 0; j < width; ++j) anchor[j] = std::max(anchor[j], pa * pb[j]);
    }
    for (int64_t j = 0; j < width; ++j) {
      rq[j] = anchor[j] > 0.0f ? above / anchor[j] : 0.0f;  // 2^-q, a power of two
      sum[j] = std::trunc(acc[j] * rq[j]);
    }
    for (int64_t l = start; l < end; ++l) {
      const float xa = av[l];
      if (xa == 0.0f) continue;
      const float* __restrict xb = bv + l * ldb;
      for (int64_t j = 0; j < width; ++j) sum[j] += std::trunc(xa * xb[j] * rq[j]);
    }
    for (int64_t j = 0; j < width; ++j) {
      const float kept = std::bit_cast<float>(std::bit_cast<uint32_t>(sum[j]) & cut_mask);
      acc[j] = kept * (anchor[j] * below) + 0.0f;  // + 0: a -0 sum is +0, as dot()'s integer sum gives
    }
    if (model.promotion_interval > 0 && (end % model.promotion_interval == 0 || end == k)) {
      for (int64_t j = 0; j < width; ++j) {
        total[j] += acc[j];
        acc[j] = 0.0f;
      }
    }
  }
  for (int64_t j = 0; j < width; ++j) c[j] = model.promotion_interval > 0 ? total[j] : acc[j];
}

// Runs decode_row(i, &finite) for the rows [0, count) in parallel and records in `finite` which held no inf or nan.
template <typename F>
void decode_rows(int64_t count, std::vector<uint8_t>& finite, F&& decode_row) {
  parallel_for(count, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      bool ok = true;
      decode_row(i, &ok);
      finite[static_cast<size_t>(i)] = ok;
    }
  });
}

}  // namespace

float tensor_core_dot(const uint8_t* a, int64_t a_stride, DType a_fp8, const uint8_t* b, int64_t b_stride, DType b_fp8,
                      int64_t k, const Fp8Accumulator& model) {
  std::vector<int32_t> sa(static_cast<size_t>(k)), ea(sa.size()), sb(sa.size()), eb(sa.size());
  bool finite = true;
  decode(a, a_stride, a_fp8, k, sa.data(), ea.data(), &finite);
  decode(b, b_stride, b_fp8, k, sb.data(), eb.data(), &finite);
  if (!finite) return plain_dot(a, a_stride, a_fp8, b, b_stride, b_fp8, k);
  return dot(sa.data(), ea.data(), sb.data(), eb.data(), k, fraction_bits(a_fp8) + fraction_bits(b_fp8), model);
}

void tensor_core_gemm(const uint8_t* a, int64_t a_row, int64_t a_col, DType a_fp8, const uint8_t* b, int64_t b_row,
                      int64_t b_col, DType b_fp8, int64_t m, int64_t n, int64_t k, const Fp8Accumulator& model,
                      float* c) {
  std::vector<uint8_t> a_finite(static_cast<size_t>(m)), b_finite(static_cast<size_t>(n));
  // An output whose row of A or column of B holds an inf or a nan is the plain sum's.
  const auto fix_non_finite = [&](int64_t i, int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j)
      if (!a_finite[i] || !b_finite[j])
        c[i * n + j] = plain_dot(a + i * a_row, a_col, a_fp8, b + j * b_col, b_row, b_fp8, k);
  };
  if (fits_f32(model)) {
    // A's rows as k (value, power) pairs; B in strips of kLanes columns, each strip [k, kLanes] contiguous (a
    // row of a strip is the outputs a row_dots call computes; the strip is read once per row of A, from cache).
    const int64_t chunks = (n + kLanes - 1) / kLanes;
    std::vector<float> av(static_cast<size_t>(m * k)), ap(av.size());
    std::vector<float> bv(static_cast<size_t>(chunks * k * kLanes)), bp(bv.size());
    decode_rows(m, a_finite, [&](int64_t i, bool* finite) {
      decode_values(a + i * a_row, a_col, a_fp8, k, &av[i * k], &ap[i * k], finite);
    });
    decode_rows(n, b_finite, [&](int64_t j, bool* finite) {
      const int64_t at = (j / kLanes) * k * kLanes + j % kLanes;  // column j of its strip
      decode_values(b + j * b_col, b_row, b_fp8, k, &bv[at], &bp[at], finite, kLanes);
    });
    parallel_for(m * chunks, std::max<int64_t>(1, 65536 / std::max<int64_t>(kLanes * k, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t t = begin; t < end; ++t) {
                     const int64_t i = t % m, j0 = (t / m) * kLanes,
                                   width = std::min(kLanes, n - j0);    // a strip of B for all rows
                     const float *sv = &bv[j0 * k], *sp = &bp[j0 * k];  // strip j0 / kLanes
                     if (width == kLanes) {
                       row_dots<kLanes>(&av[i * k], &ap[i * k], sv, sp, kLanes, width, k, model, c + i * n + j0);
                     } else {
                       row_dots<0>(&av[i * k], &ap[i * k], sv, sp, kLanes, width, k, model, c + i * n + j0);
                     }
                     fix_non_finite(i, j0, j0 + width);
                   }
                 });
    return;
  }
  // Models whose group sums outgrow an f32 (many retained bits, long groups): one integer dot product per output.
  std::vector<int32_t> sa(static_cast<size_t>(m * k)), ea(sa.size()), sb(static_cast<size_t>(n * k)), eb(sb.size());
  decode_rows(m, a_finite,
              [&](int64_t i, bool* finite) { decode(a + i * a_row, a_col, a_fp8, k, &sa[i * k], &ea[i * k], finite); });
  decode_rows(n, b_finite,
              [&](int64_t j, bool* finite) { decode(b + j * b_col, b_row, b_fp8, k, &sb[j * k], &eb[j * k], finite); });
  const int mbits = fraction_bits(a_fp8) + fraction_bits(b_fp8);
  parallel_for(m, std::max<int64_t>(1, 65536 / std::max<int64_t>(n * k, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < n; ++j)
        c[i * n + j] = dot(&sa[i * k], &ea[i * k], &sb[j * k], &eb[j * k], k, mbits, model);
      fix_non_finite(i, 0, n);
    }
  });
}

}  // namespace cpu
}  // namespace mantissa

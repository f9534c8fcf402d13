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
  // A's rows and B's columns, each as k contiguous (sig, exp) pairs, and which of them hold an inf or a nan.
  std::vector<int32_t> sa(static_cast<size_t>(m * k)), ea(sa.size()), sb(static_cast<size_t>(n * k)), eb(sb.size());
  std::vector<uint8_t> a_finite(static_cast<size_t>(m)), b_finite(static_cast<size_t>(n));
  parallel_for(m, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      bool finite = true;
      decode(a + i * a_row, a_col, a_fp8, k, &sa[i * k], &ea[i * k], &finite);
      a_finite[i] = finite;
    }
  });
  parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      bool finite = true;
      decode(b + j * b_col, b_row, b_fp8, k, &sb[j * k], &eb[j * k], &finite);
      b_finite[j] = finite;
    }
  });
  const int mbits = fraction_bits(a_fp8) + fraction_bits(b_fp8);
  parallel_for(m, std::max<int64_t>(1, 65536 / std::max<int64_t>(n * k, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        c[i * n + j] = a_finite[i] && b_finite[j]
                           ? dot(&sa[i * k], &ea[i * k], &sb[j * k], &eb[j * k], k, mbits, model)
                           : plain_dot(a + i * a_row, a_col, a_fp8, b + j * b_col, b_row, b_fp8, k);
      }
    }
  });
}

}  // namespace cpu
}  // namespace mantissa

// The CPU's FP8 accumulator models (ops/fp8/accumulator.h).
#include "ops/fp8/accumulator.h"

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>

#include "framework/error.h"

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

// x cut toward zero to a multiple of 2^q (as a count of 2^q), x = sig * 2^e exactly.
int64_t units(int64_t sig, int e, int q) {
  const int shift = e - q;
  if (shift >= 0) return sig * (int64_t{1} << shift);  // |sig| < 2^8, shift small: see the anchor
  if (shift <= -62) return 0;
  const int64_t magnitude = (sig < 0 ? -sig : sig) >> -shift;
  return sig < 0 ? -magnitude : magnitude;
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

Fp8Accumulator parse_fp8_accumulator(std::string_view text) {
  if (text == "f32") return Fp8Accumulator::f32();
  if (text == "hopper") return Fp8Accumulator::hopper(false);
  if (text == "hopper-fast") return Fp8Accumulator::hopper(true);
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

float tensor_core_dot(const uint8_t* a, int64_t a_stride, DType a_fp8, const uint8_t* b, int64_t b_stride, DType b_fp8,
                      int64_t k, const Fp8Accumulator& model) {
  constexpr int kNone = std::numeric_limits<int>::min() / 2;
  float total = 0.0f, acc = 0.0f;
  for (int64_t start = 0; start < k; start += model.group) {
    const int64_t end = std::min<int64_t>(k, start + model.group);
    // The anchor: the products' largest exponent sum and the running sum's exponent.
    int anchor = kNone;
    for (int64_t l = start; l < end; ++l) {
      const Factor fa = factor(a[l * a_stride], a_fp8), fb = factor(b[l * b_stride], b_fp8);
      if (!fa.finite || !fb.finite) {  // inf or nan: the plain f32 sum carries it as the hardware's does
        float plain = 0.0f;
        for (int64_t i = 0; i < k; ++i) plain += fp8_value(a[i * a_stride], a_fp8) * fp8_value(b[i * b_stride], b_fp8);
        return plain;
      }
      if (fa.sig != 0 && fb.sig != 0) anchor = std::max(anchor, fa.exp + fb.exp);
    }
    int acc_exp = kNone;
    if (acc != 0.0f) {
      int e = 0;
      std::frexp(acc, &e);
      acc_exp = e - 1;
      anchor = std::max(anchor, acc_exp);
    }
    if (anchor != kNone) {
      const int q = anchor - model.retained_bits;  // the quantum's exponent
      int64_t sum = 0;
      for (int64_t l = start; l < end; ++l) {
        const Factor fa = factor(a[l * a_stride], a_fp8), fb = factor(b[l * b_stride], b_fp8);
        sum += units(int64_t{fa.sig} * fb.sig, fa.exp + fb.exp - fa.mbits - fb.mbits, q);
      }
      if (acc != 0.0f) sum += static_cast<int64_t>(std::trunc(std::ldexp(static_cast<double>(acc), -q)));
      // The sum cut toward zero to retained_bits + 1 significant bits, then exact in an f32.
      const uint64_t magnitude = static_cast<uint64_t>(sum < 0 ? -sum : sum);
      const int width = static_cast<int>(std::bit_width(magnitude));
      const int drop = std::max(0, width - (model.retained_bits + 1));
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

}  // namespace cpu
}  // namespace mantissa

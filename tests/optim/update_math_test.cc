// optim/update_math.h, the one written form of each optimizer's element update, is called by both the CPU
// loops (optim/cpu/optim_kernels.cc, compiled with -ffp-contract=off) and the CUDA kernels (nvcc contracts
// by default). This file is compiled with g++'s default contraction (-ffp-contract=fast, FMA available), so
// comparing the CPU kernels with the functions called here, driven as the CUDA kernels drive them (the step
// count first, then the elements), checks what the CUDA results rest on: no product in the header is left
// for a compiler to fuse. Bit for bit on random inputs, over several steps, for every SGD, Adam and Lion
// variant, in f32 and f64.
#include "optim/update_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "optim/cpu/optim_kernels.h"

namespace mantissa {
namespace {

namespace um = update_math;

// Values over many binades (the roundings differ most when magnitudes differ), both signs.
template <typename T>
std::vector<T> random_values(int64_t n, uint32_t seed, double center_exponent) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0), exponent(-6.0, 6.0);
  std::vector<T> out(static_cast<size_t>(n));
  for (auto& v : out) {
    const double sign = (rng() & 1) ? -1.0 : 1.0;
    v = static_cast<T>(sign * mantissa(rng) * std::exp2(std::round(exponent(rng) + center_exponent)));
  }
  return out;
}

// Bitwise equality, with every nan equal to every nan (payloads differ between x86 and the GPU).
template <typename T>
void expect_same(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  int64_t wrong = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = std::memcmp(&a[i], &b[i], sizeof(T)) == 0 || (std::isnan(a[i]) && std::isnan(b[i]));
    if (!same && wrong++ < 3) ADD_FAILURE() << what << "[" << i << "]: " << a[i] << " vs " << b[i];
  }
  EXPECT_EQ(wrong, 0) << what;
}

constexpr int64_t kN = 4099;  // not a multiple of any vector width: the CPU kernel's tail loop runs too
constexpr int kSteps = 4;

struct SgdCase {
  SGDOptions options;
  bool scaled;
};

template <typename T>
void check_sgd(const SgdCase& k, const std::string& name) {
  const auto& o = k.options;
  std::vector<T> p_cpu = random_values<T>(kN, 1, 0.0), p_hd = p_cpu;
  std::vector<T> buf_cpu(kN, T(0)), buf_hd(kN, T(0));
  int64_t step_cpu = 0, step_hd = 0;
  const float inv_scale = static_cast<float>(1.0 / 3000.0);  // not a power of two: the unscaling rounds
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<T> g = random_values<T>(kN, 100 + s, k.scaled ? 11.0 : -3.0);
    cpu::sgd_step<T>({.param = p_cpu.data(),
                      .grad = g.data(),
                      .momentum_buffer = o.momentum != 0.0 ? buf_cpu.data() : nullptr,
                      .step = &step_cpu,
                      .n = kN},
                     o, k.scaled ? cpu::ScalingPointers{.inv_scale = &inv_scale} : cpu::ScalingPointers{});
    // The header, driven as the CUDA kernel drives it: the step count first, then the elements.
    const bool first = step_hd == 0;
    step_hd += 1;
    const auto c = um::sgd_constants<T>(o.lr, o.momentum, o.dampening, o.weight_decay,
                                        k.scaled ? static_cast<T>(inv_scale) : T(1));
    const um::SgdFlags f{.scaled = k.scaled,
                         .decay = o.weight_decay != 0.0,
                         .momentum = o.momentum != 0.0,
                         .use_buffer = o.momentum != 0.0 && !first,
                         .nesterov = o.momentum != 0.0 && o.nesterov};
    for (int64_t i = 0; i < kN; ++i) p_hd[i] = um::sgd_element<T>(p_hd[i], g[i], buf_hd[i], c, f);
    expect_same(p_cpu, p_hd, name + " param, step " + std::to_string(s));
    if (o.momentum != 0.0) expect_same(buf_cpu, buf_hd, name + " momentum_buffer, step " + std::to_string(s));
  }
  EXPECT_EQ(step_cpu, step_hd);
}

TEST(UpdateMath, SgdEqualsCpuKernel) {
  const SgdCase cases[] = {
      {{.lr = 0.1}, false},
      {{.lr = 0.1}, true},
      {{.lr = 0.05, .weight_decay = 1e-2}, true},
      {{.lr = 0.05, .momentum = 0.9}, false},
      {{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3}, true},
      {{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true}, true},
      {{.lr = 0.3, .momentum = 0.5, .nesterov = true}, false},
  };
  int index = 0;
  for (const auto& k : cases) {
    check_sgd<float>(k, "f32 case " + std::to_string(index));
    check_sgd<double>(k, "f64 case " + std::to_string(index));
    ++index;
  }
}

struct AdamCase {
  AdamOptions options;
  cpu::WeightDecay mode;
  bool scaled;
};

template <typename T>
void check_adam(const AdamCase& k, const std::string& name) {
  const auto& o = k.options;
  std::vector<T> p_cpu = random_values<T>(kN, 2, 0.0), p_hd = p_cpu;
  std::vector<T> m_cpu(kN, T(0)), v_cpu(kN, T(0)), vmax_cpu(kN, T(0));
  std::vector<T> m_hd = m_cpu, v_hd = v_cpu, vmax_hd = vmax_cpu;
  int64_t step_cpu = 0, step_hd = 0;
  const float inv_scale = static_cast<float>(1.0 / 3000.0);
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<T> g = random_values<T>(kN, 200 + s, k.scaled ? 11.0 : -3.0);
    cpu::adam_step<T>({.param = p_cpu.data(),
                       .grad = g.data(),
                       .exp_avg = m_cpu.data(),
                       .exp_avg_sq = v_cpu.data(),
                       .max_exp_avg_sq = o.amsgrad ? vmax_cpu.data() : nullptr,
                       .step = &step_cpu,
                       .n = kN},
                      o, k.mode, k.scaled ? cpu::ScalingPointers{.inv_scale = &inv_scale} : cpu::ScalingPointers{});
    step_hd += 1;
    const auto c = um::adam_constants<T>(o.lr, o.betas[0], o.betas[1], o.eps, o.weight_decay,
                                         k.scaled ? static_cast<T>(inv_scale) : T(1),
                                         um::adam_step_values(o.lr, o.betas[0], o.betas[1], step_hd));
    const um::AdamFlags f{.scaled = k.scaled,
                          .amsgrad = o.amsgrad,
                          .l2 = k.mode == cpu::WeightDecay::kL2 && o.weight_decay != 0.0,
                          .decoupled = k.mode == cpu::WeightDecay::kDecoupled && o.weight_decay != 0.0};
    for (int64_t i = 0; i < kN; ++i) p_hd[i] = um::adam_element<T>(p_hd[i], g[i], m_hd[i], v_hd[i], vmax_hd[i], c, f);
    const std::string at = ", step " + std::to_string(s);
    expect_same(p_cpu, p_hd, name + " param" + at);
    expect_same(m_cpu, m_hd, name + " exp_avg" + at);
    expect_same(v_cpu, v_hd, name + " exp_avg_sq" + at);
    if (o.amsgrad) expect_same(vmax_cpu, vmax_hd, name + " max_exp_avg_sq" + at);
  }
}

TEST(UpdateMath, AdamEqualsCpuKernel) {
  using WD = cpu::WeightDecay;
  const AdamCase cases[] = {
      {{.lr = 1e-3}, WD::kL2, false},
      {{.lr = 1e-3}, WD::kL2, true},
      {{.lr = 3e-4, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 1e-2}, WD::kL2, true},
      {{.lr = 3e-4, .weight_decay = 0.1}, WD::kDecoupled, true},
      {{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true}, WD::kDecoupled, false},
      {{.lr = 1e-2, .weight_decay = 1e-2, .amsgrad = true}, WD::kL2, true},
  };
  int index = 0;
  for (const auto& k : cases) {
    check_adam<float>(k, "f32 case " + std::to_string(index));
    check_adam<double>(k, "f64 case " + std::to_string(index));
    ++index;
  }
}

struct LionCase {
  LionOptions options;
  bool scaled;
};

template <typename T>
void check_lion(const LionCase& k, const std::string& name) {
  const auto& o = k.options;
  std::vector<T> p_cpu = random_values<T>(kN, 3, 0.0), p_hd = p_cpu;
  std::vector<T> m_cpu(kN, T(0)), m_hd(kN, T(0));
  int64_t step_cpu = 0;
  const float inv_scale = static_cast<float>(1.0 / 3000.0);
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<T> g = random_values<T>(kN, 300 + s, k.scaled ? 11.0 : -3.0);
    cpu::lion_step<T>({.param = p_cpu.data(), .grad = g.data(), .exp_avg = m_cpu.data(), .step = &step_cpu, .n = kN}, o,
                      k.scaled ? cpu::ScalingPointers{.inv_scale = &inv_scale} : cpu::ScalingPointers{});
    const auto c = um::lion_constants<T>(o.lr, o.betas[0], o.betas[1], o.weight_decay,
                                         k.scaled ? static_cast<T>(inv_scale) : T(1));
    const um::LionFlags f{.scaled = k.scaled, .decay = o.weight_decay != 0.0};
    for (int64_t i = 0; i < kN; ++i) p_hd[i] = um::lion_element<T>(p_hd[i], g[i], m_hd[i], c, f);
    const std::string at = ", step " + std::to_string(s);
    expect_same(p_cpu, p_hd, name + " param" + at);
    expect_same(m_cpu, m_hd, name + " exp_avg" + at);
  }
  EXPECT_EQ(step_cpu, kSteps);
}

TEST(UpdateMath, LionEqualsCpuKernel) {
  const LionCase cases[] = {
      {{.lr = 1e-4}, false},
      {{.lr = 1e-4}, true},
      {{.lr = 3e-4, .betas = {0.95, 0.98}, .weight_decay = 0.1}, true},
      {{.lr = 1e-3, .weight_decay = 1.0}, false},
  };
  int index = 0;
  for (const auto& k : cases) {
    check_lion<float>(k, "f32 case " + std::to_string(index));
    check_lion<double>(k, "f64 case " + std::to_string(index));
    ++index;
  }
}

TEST(UpdateMath, SignIsMinusOneZeroOneAndKeepsNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(um::sign(3.5f), 1.0f);
  EXPECT_EQ(um::sign(-1e-30f), -1.0f);
  EXPECT_EQ(um::sign(-inf), -1.0f);
  EXPECT_EQ(um::sign(0.0f), 0.0f);
  EXPECT_EQ(um::sign(-0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(um::sign(nan)));  // torch.sign gives 0 here; a nan grad must not freeze the weights
}

TEST(UpdateMath, MaximumLetsNanWin) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(um::maximum(nan, 1.0f)));
  EXPECT_TRUE(std::isnan(um::maximum(1.0f, nan)));
  EXPECT_EQ(um::maximum(2.0f, -3.0f), 2.0f);
  EXPECT_EQ(um::maximum(-3.0f, 2.0f), 2.0f);
}

// The host path must not contract: a product rounded on its own differs from the fused result here.
TEST(UpdateMath, HostProductsAreRoundedBeforeTheAdd) {
  // x = 1 + 2^-13 (read through volatile, so the products happen at run time): x * x = 1 + 2^-12 + 2^-26,
  // which rounds to 1 + 2^-12 in f32; fused with - 1 the 2^-26 survives.
  volatile float vx = 1.0f + std::ldexp(1.0f, -13), vc = -1.0f;
  const float x = vx, c = vc;
  const float fused = std::fma(x, x, c), separate = um::add(um::mul(x, x), c);
  EXPECT_NE(fused, separate);
  EXPECT_EQ(separate, std::ldexp(1.0f, -12));
}

}  // namespace
}  // namespace mantissa

// The mixed-precision CUDA kernels against the CPU kernels, through their launchers on raw device buffers:
// fused SGD, Adam/AdamW and Lion (f32 bit for bit: both call optim/update_math.h), their working
// copies, a skipped step changing nothing, unscale-and-check in f32/f16/bf16, and the loss-scale update
// against the host rule. Lists of many tensors of odd sizes, some misaligned (the scalar path), some
// longer than a chunk, more than one launch's worth. Skipped without a device.
#include <gtest/gtest.h>

#include "framework/cuda/device.h"
#include "tests/support/cuda_skip.h"

#ifdef MANTISSA_WITH_CUDA
#include <cmath>
#include <cstring>
#include <cuda_runtime_api.h>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "amp/cpu/amp_kernels.h"
#include "amp/cuda/amp_kernels.h"
#include "amp/loss_scale_rule.h"
#include "framework/cuda/check.h"
#include "framework/half.h"
#include "optim/cpu/optim_kernels.h"
#include "optim/cuda/fused_optim.h"

namespace mantissa {
namespace {

// n elements of T on the device; `misaligned` starts the data one element past a 256-byte boundary, so
// the kernels must take their scalar path for that tensor.
template <typename T>
class DeviceArray {
 public:
  DeviceArray(int64_t n, bool misaligned) : n_(n), offset_(misaligned ? 1 : 0) {
    MT_CUDA_CHECK(cudaMalloc(&base_, static_cast<size_t>(n + 1) * sizeof(T)));
  }
  ~DeviceArray() { (void)cudaFree(base_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return static_cast<T*>(base_) + offset_; }
  void upload(const std::vector<T>& v) const {
    MT_CUDA_CHECK(cudaMemcpy(get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> v(static_cast<size_t>(n_));
    MT_CUDA_CHECK(cudaMemcpy(v.data(), get(), v.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  void poison() const { MT_CUDA_CHECK(cudaMemset(get(), 0xFF, static_cast<size_t>(n_) * sizeof(T))); }

 private:
  void* base_ = nullptr;
  int64_t n_;
  int64_t offset_;
};

template <typename T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}
bool same_value(float a, float b) { return same_bits(a, b) || (std::isnan(a) && std::isnan(b)); }

// Bitwise, nan equal to nan (payloads differ between x86 and the GPU).
template <typename T>
void expect_equal(const std::vector<T>& cpu, const std::vector<T>& gpu, const std::string& what) {
  ASSERT_EQ(cpu.size(), gpu.size()) << what;
  int64_t wrong = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    bool same;
    if constexpr (std::is_same_v<T, float>) {
      same = same_value(cpu[i], gpu[i]);
    } else {
      same = same_bits(cpu[i], gpu[i]) || (std::isnan(float(cpu[i])) && std::isnan(float(gpu[i])));
    }
    if (!same && wrong++ < 3)
      ADD_FAILURE() << what << "[" << i << "]: cpu " << float(cpu[i]) << " gpu " << float(gpu[i]);
  }
  EXPECT_EQ(wrong, 0) << what;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng, double scale) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(d(rng) * scale);
  return v;
}

// Sizes: empty, tiny, odd, over one 64 K chunk, over two, and 60 small ones (more than a launch's tensors).
std::vector<int64_t> list_sizes() {
  std::vector<int64_t> sizes{0, 1, 3, 4099, 70000, 131077};
  std::mt19937 rng(9);
  for (int i = 0; i < 60; ++i) sizes.push_back(1 + rng() % 3000);
  return sizes;
}

// One tensor of an optimizer list, on both sides: host vectors (the CPU run) and device arrays.
struct Slot {
  std::vector<float> host;
  std::unique_ptr<DeviceArray<float>> dev;
};
struct ListTensor {
  int64_t n;
  Slot param, grad, a, b, c;  // a, b, c: momentum buffer, or exp_avg / exp_avg_sq / max_exp_avg_sq
  int64_t step_host = 0;
  std::unique_ptr<DeviceArray<int64_t>> step_dev;
  std::vector<uint16_t> copy_host;
  std::unique_ptr<DeviceArray<uint16_t>> copy_dev;
};

std::vector<ListTensor> make_list(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<ListTensor> list;
  int index = 0;
  for (int64_t n : list_sizes()) {
    const bool misaligned = index++ % 3 == 1;
    ListTensor t{.n = n};
    auto init = [&](Slot& s, std::vector<float> values) {
      s.host = std::move(values);
      s.dev = std::make_unique<DeviceArray<float>>(n, misaligned);
      s.dev->upload(s.host);
    };
    init(t.param, random_floats(n, rng, 1.0));
    init(t.grad, std::vector<float>(static_cast<size_t>(n), 0.0f));
    init(t.a, std::vector<float>(static_cast<size_t>(n), 0.0f));
    init(t.b, std::vector<float>(static_cast<size_t>(n), 0.0f));
    init(t.c, std::vector<float>(static_cast<size_t>(n), 0.0f));
    t.step_dev = std::make_unique<DeviceArray<int64_t>>(1, false);
    t.step_dev->upload({0});
    t.copy_host.assign(static_cast<size_t>(n), 0);
    t.copy_dev = std::make_unique<DeviceArray<uint16_t>>(n, misaligned);
    list.push_back(std::move(t));
  }
  return list;
}

// New scaled grads on both sides.
void new_grads(std::vector<ListTensor>& list, std::mt19937& rng, double scale) {
  for (auto& t : list) {
    t.grad.host = random_floats(t.n, rng, scale);
    t.grad.dev->upload(t.grad.host);
  }
}

void compare_list(const std::vector<ListTensor>& list, int slots, bool copies, const std::string& what) {
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& t = list[i];
    const std::string at = what + ", tensor " + std::to_string(i) + " (n " + std::to_string(t.n) + ")";
    expect_equal(t.param.host, t.param.dev->download(), at + " param");
    if (slots > 0) expect_equal(t.a.host, t.a.dev->download(), at + " slot a");
    if (slots > 1) expect_equal(t.b.host, t.b.dev->download(), at + " slot b");
    if (slots > 2) expect_equal(t.c.host, t.c.dev->download(), at + " slot c");
    EXPECT_EQ(t.step_host, t.step_dev->download()[0]) << at << " step";
    if (copies) expect_equal(t.copy_host, t.copy_dev->download(), at + " working copy");
  }
}

struct Scalars {
  DeviceArray<float> inv_scale{1, false}, found_inf{1, false};
};

// Runs `steps` scaled steps on both sides, then one with found_inf = 1 that must change nothing.
template <typename CpuStep, typename GpuStep>
void run_steps(std::vector<ListTensor>& list, int slots, cpu::CopyDType copy, CpuStep&& cpu_step, GpuStep&& gpu_step,
               const std::string& name) {
  Scalars s;
  const float inv_scale = static_cast<float>(1.0 / 3000.0);  // rounds: both sides must round the product alike
  const float clean = 0.0f;
  s.inv_scale.upload({inv_scale});
  std::mt19937 rng(21);
  for (int step = 0; step < 3; ++step) {
    new_grads(list, rng, 3000.0);
    for (auto& t : list) t.copy_dev->poison();  // a copy the kernel forgets to write fails
    s.found_inf.upload({0.0f});
    for (auto& t : list) cpu_step(t, cpu::ScalingPointers{.inv_scale = &inv_scale, .found_inf = &clean});
    gpu_step(cpu::ScalingPointers{.inv_scale = s.inv_scale.get(), .found_inf = s.found_inf.get()});
    MT_CUDA_CHECK(cudaDeviceSynchronize());
    compare_list(list, slots, copy != cpu::CopyDType::kNone, name + ", step " + std::to_string(step));
  }
  // found_inf set: nothing moves on the device, nothing on the CPU either (the CPU side is not run).
  new_grads(list, rng, 3000.0);
  s.found_inf.upload({1.0f});
  gpu_step(cpu::ScalingPointers{.inv_scale = s.inv_scale.get(), .found_inf = s.found_inf.get()});
  MT_CUDA_CHECK(cudaDeviceSynchronize());
  compare_list(list, slots, copy != cpu::CopyDType::kNone, name + ", skipped step");
}

void* copy_ptr(ListTensor& t, cpu::CopyDType copy, bool device) {
  if (copy == cpu::CopyDType::kNone) return nullptr;
  return device ? static_cast<void*>(t.copy_dev->get()) : static_cast<void*>(t.copy_host.data());
}

TEST(CudaFusedOptim, SgdEqualsCpuKernel) {
  MT_SKIP_WITHOUT_CUDA();
  const SGDOptions cases[] = {
      {.lr = 0.1},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3},
      {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true},
  };
  int index = 0;
  for (const SGDOptions& o : cases) {
    const cpu::CopyDType copy = index == 2 ? cpu::CopyDType::kBF16 : cpu::CopyDType::kF16;
    auto list = make_list(100 + index);
    const bool momentum = o.momentum != 0.0;
    run_steps(
        list, momentum ? 1 : 0, copy,
        [&](ListTensor& t, cpu::ScalingPointers s) {
          cpu::sgd_step<float>({.param = t.param.host.data(),
                                .grad = t.grad.host.data(),
                                .momentum_buffer = momentum ? t.a.host.data() : nullptr,
                                .step = &t.step_host,
                                .n = t.n,
                                .copy = {.data = copy_ptr(t, copy, false), .dtype = copy}},
                               o, s);
        },
        [&](cpu::ScalingPointers s) {
          std::vector<cpu::SgdPointers<float>> ptrs;
          for (auto& t : list)
            ptrs.push_back({.param = t.param.dev->get(),
                            .grad = t.grad.dev->get(),
                            .momentum_buffer = momentum ? t.a.dev->get() : nullptr,
                            .step = t.step_dev->get(),
                            .n = t.n,
                            .copy = {.data = copy_ptr(t, copy, true), .dtype = copy}});
          gpu::sgd_step(ptrs, o, s, nullptr);
        },
        "sgd case " + std::to_string(index));
    ++index;
  }
}

TEST(CudaFusedOptim, AdamEqualsCpuKernel) {
  MT_SKIP_WITHOUT_CUDA();
  struct Case {
    AdamOptions o;
    cpu::WeightDecay mode;
  };
  const Case cases[] = {
      {{.lr = 1e-3}, cpu::WeightDecay::kL2},
      {{.lr = 3e-4, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 1e-2}, cpu::WeightDecay::kL2},
      {{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true}, cpu::WeightDecay::kDecoupled},
  };
  int index = 0;
  for (const Case& k : cases) {
    const cpu::CopyDType copy = index == 1 ? cpu::CopyDType::kNone : cpu::CopyDType::kBF16;
    auto list = make_list(200 + index);
    run_steps(
        list, k.o.amsgrad ? 3 : 2, copy,
        [&](ListTensor& t, cpu::ScalingPointers s) {
          cpu::adam_step<float>({.param = t.param.host.data(),
                                 .grad = t.grad.host.data(),
                                 .exp_avg = t.a.host.data(),
                                 .exp_avg_sq = t.b.host.data(),
                                 .max_exp_avg_sq = k.o.amsgrad ? t.c.host.data() : nullptr,
                                 .step = &t.step_host,
                                 .n = t.n,
                                 .copy = {.data = copy_ptr(t, copy, false), .dtype = copy}},
                                k.o, k.mode, s);
        },
        [&](cpu::ScalingPointers s) {
          std::vector<cpu::AdamPointers<float>> ptrs;
          for (auto& t : list)
            ptrs.push_back({.param = t.param.dev->get(),
                            .grad = t.grad.dev->get(),
                            .exp_avg = t.a.dev->get(),
                            .exp_avg_sq = t.b.dev->get(),
                            .max_exp_avg_sq = k.o.amsgrad ? t.c.dev->get() : nullptr,
                            .step = t.step_dev->get(),
                            .n = t.n,
                            .copy = {.data = copy_ptr(t, copy, true), .dtype = copy}});
          gpu::adam_step(ptrs, k.o, k.mode, s, nullptr);
        },
        "adam case " + std::to_string(index));
    ++index;
  }
}

TEST(CudaFusedOptim, LionEqualsCpuKernel) {
  MT_SKIP_WITHOUT_CUDA();
  const LionOptions cases[] = {{.lr = 1e-4}, {.lr = 3e-4, .betas = {0.95, 0.98}, .weight_decay = 0.1}};
  int index = 0;
  for (const LionOptions& o : cases) {
    const cpu::CopyDType copy = index == 0 ? cpu::CopyDType::kNone : cpu::CopyDType::kF16;
    auto list = make_list(300 + index);
    run_steps(
        list, 1, copy,
        [&](ListTensor& t, cpu::ScalingPointers s) {
          cpu::lion_step<float>({.param = t.param.host.data(),
                                 .grad = t.grad.host.data(),
                                 .exp_avg = t.a.host.data(),
                                 .step = &t.step_host,
                                 .n = t.n,
                                 .copy = {.data = copy_ptr(t, copy, false), .dtype = copy}},
                                o, s);
        },
        [&](cpu::ScalingPointers s) {
          std::vector<cpu::LionPointers<float>> ptrs;
          for (auto& t : list)
            ptrs.push_back({.param = t.param.dev->get(),
                            .grad = t.grad.dev->get(),
                            .exp_avg = t.a.dev->get(),
                            .step = t.step_dev->get(),
                            .n = t.n,
                            .copy = {.data = copy_ptr(t, copy, true), .dtype = copy}});
          gpu::lion_step(ptrs, o, s, nullptr);
        },
        "lion case " + std::to_string(index));
    ++index;
  }
}

// Unscale-and-check over a list of one dtype: the f32 result equals cpu::unscale_and_check; 16-bit grads
// equal round(float(g) * inv) (PyTorch's opmath); found_inf is set iff a non-finite value was planted.
template <typename T>
void check_unscale(gpu::GradPass pass, int plant, const std::string& name) {
  const auto sizes = list_sizes();
  std::mt19937 rng(31);
  const float inv_scale = static_cast<float>(1.0 / 3000.0);
  std::vector<std::vector<T>> host;
  std::vector<std::unique_ptr<DeviceArray<T>>> dev;
  std::vector<void*> ptrs;
  float found_cpu = 0.0f;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto values = random_floats(sizes[i], rng, 3000.0);
    std::vector<T> h(values.begin(), values.end());
    // plant: 1 an inf, 2 a nan, in the middle of the second chunk of the 131077-element tensor.
    if (plant != 0 && sizes[i] == 131077)
      h[70001] = static_cast<T>(plant == 1 ? std::numeric_limits<float>::infinity() : std::nanf(""));
    dev.push_back(std::make_unique<DeviceArray<T>>(sizes[i], i % 3 == 1));
    dev.back()->upload(h);
    ptrs.push_back(dev.back()->get());
    host.push_back(std::move(h));
  }
  for (auto& h : host) {
    bool non_finite = false;
    for (auto& x : h) {
      non_finite |= !std::isfinite(float(x));
      if (pass == gpu::GradPass::kUnscale) x = static_cast<T>(float(x) * inv_scale);
    }
    if (non_finite) found_cpu = 1.0f;
  }
  DeviceArray<float> inv(1, false), found(1, false);
  inv.upload({inv_scale});
  found.upload({0.0f});
  const DType dtype = std::is_same_v<T, float> ? DType::kF32 : std::is_same_v<T, Half> ? DType::kF16 : DType::kBF16;
  gpu::unscale_and_check(dtype, ptrs, sizes, inv.get(), found.get(), pass, nullptr);
  MT_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(found.download()[0], found_cpu) << name;
  for (size_t i = 0; i < sizes.size(); ++i)
    expect_equal(host[i], dev[i]->download(), name + " tensor " + std::to_string(i));
}

TEST(CudaAmpKernels, UnscaleAndCheck) {
  MT_SKIP_WITHOUT_CUDA();
  for (int plant : {0, 1, 2}) {
    const std::string p = " plant " + std::to_string(plant);
    check_unscale<float>(gpu::GradPass::kUnscale, plant, "f32 unscale" + p);
    check_unscale<Half>(gpu::GradPass::kUnscale, plant, "f16 unscale" + p);
    check_unscale<BFloat16>(gpu::GradPass::kUnscale, plant, "bf16 unscale" + p);
    check_unscale<float>(gpu::GradPass::kCheckOnly, plant, "f32 check" + p);
  }
}

TEST(CudaAmpKernels, UnscaleF32EqualsCpuKernel) {
  MT_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(4);
  const int64_t n = 200003;
  auto host = random_floats(n, rng, 1e4);
  DeviceArray<float> g(n, false), inv(1, false), found(1, false);
  g.upload(host);
  const float inv_scale = static_cast<float>(1.0 / 65536.0 / 3.0), zero = 0.0f;
  float found_cpu = zero;
  inv.upload({inv_scale});
  found.upload({0.0f});
  cpu::unscale_and_check(host.data(), n, &inv_scale, &found_cpu);
  void* ptr = g.get();
  gpu::unscale_and_check(DType::kF32, std::span<void* const>(&ptr, 1), std::span<const int64_t>(&n, 1), inv.get(),
                         found.get(), gpu::GradPass::kUnscale, nullptr);
  MT_CUDA_CHECK(cudaDeviceSynchronize());
  expect_equal(host, g.download(), "f32 unscale");
  EXPECT_EQ(found.download()[0], found_cpu);
}

// The single-thread update kernel against the host rule over a sequence with two optimizers' flags, under
// both hysteresis refill rules.
TEST(CudaAmpKernels, LossScaleUpdateEqualsHostRule) {
  MT_SKIP_WITHOUT_CUDA();
  namespace loss_scale = amp::loss_scale;
  for (amp::HysteresisRefill refill : {amp::HysteresisRefill::kOnCleanStep, amp::HysteresisRefill::kOnGrowth}) {
    const loss_scale::Rule rule{.growth_factor = 2.0,
                                .backoff_factor = 0.5,
                                .growth_interval = 3,
                                .hysteresis = 2,
                                .hysteresis_refill = refill,
                                .min_scale = 1.0,
                                .max_scale = 4096.0,
                                .throw_at_min_scale = false};
    DeviceArray<float> scale(1, false), inv(1, false), flag_a(1, false), flag_b(1, false);
    DeviceArray<int64_t> counters(loss_scale::kNumCounters, false);
    float host_scale = 256.0f, host_inv = 0.0f;
    std::vector<int64_t> host_counters(loss_scale::kNumCounters);
    loss_scale::initial_counters(host_counters.data());
    scale.upload({host_scale});
    counters.upload(host_counters);
    std::mt19937 rng(8);
    for (int i = 0; i < 80; ++i) {
      const std::string at = "refill " + std::to_string(static_cast<int>(refill)) + ", iteration " + std::to_string(i);
      const bool a = rng() % 4 == 0, b = rng() % 6 == 0;
      flag_a.upload({a ? 1.0f : 0.0f});
      flag_b.upload({b ? 1.0f : 0.0f});
      const float* flags[] = {flag_a.get(), flag_b.get()};
      gpu::update_loss_scale(scale.get(), inv.get(), counters.get(), flags, rule, nullptr);
      loss_scale::apply_rule(host_scale, host_inv, host_counters.data(), a || b, rule);
      MT_CUDA_CHECK(cudaDeviceSynchronize());
      ASSERT_EQ(scale.download()[0], host_scale) << at;
      ASSERT_EQ(inv.download()[0], host_inv) << at;
      ASSERT_EQ(counters.download(), host_counters) << at;
    }
  }
}

}  // namespace
}  // namespace mantissa

#else  // !MANTISSA_WITH_CUDA

TEST(CudaAmpKernels, NeedCuda) { GTEST_SKIP() << "built without CUDA (-DMANTISSA_CUDA=ON builds these tests)"; }

#endif

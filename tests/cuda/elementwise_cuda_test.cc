// CUDA elementwise ops against the CPU on random inputs: contiguous (vectorized path, odd sizes for the
// scalar tail), transposed, sliced and broadcast (strided path), in f32, f16 and bf16, forward and
// backward; and the launchers writing every element of a poisoned output. Skipped without a device.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "framework/autograd.h"
#include "framework/cuda/device.h"
#include "ops/elementwise/elementwise.h"
#include "tests/cuda/cuda_compare.h"

#ifdef MANTISSA_WITH_CUDA
#include <cuda_runtime_api.h>

#include "ops/elementwise/elementwise_launch.h"
#endif

namespace mantissa {
namespace {

using testing::on_cuda;
using testing::random_tensor;
using testing::within_ulps;

constexpr DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// The same values in three layouts: contiguous [37, 129] (not a multiple of any vector width),
// a transposed view of a [129, 37] tensor, and every other column of a [37, 258] tensor.
std::vector<std::pair<std::string, Tensor>> layouts(DType dt, uint64_t seed, double low, double high) {
  const Tensor base = random_tensor({37, 129}, dt, seed, low, high);
  Tensor wide = zeros({37, 258}, {.dtype = dt});
  copy_(wide.slice(1, 0, 258, 2), base);
  return {{"contiguous", base}, {"transposed", base.t().contiguous().t()}, {"sliced", wide.slice(1, 0, 258, 2)}};
}

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> fn;
  // f32 ulps between CUDA's math library and the CPU's: 0 for IEEE-exact operations (+, -, *, /, sqrt,
  // compares); exp/erf/tanh/pow/log are within 2 ulp on each side (CPU's vectorized exp/erf, CUDA's
  // expf/erff/tanhf/powf/logf per the CUDA math API tables), so up to 4 apart.
  int64_t ulps;
  double low = -3.0, high = 3.0;
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, 0},
      {"exp", [](const Tensor& x) { return exp(x); }, 4},
      {"log", [](const Tensor& x) { return log(x); }, 4, 0.01, 5.0},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0, 0.0, 5.0},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0, 0.01, 5.0},
      {"abs", [](const Tensor& x) { return abs(x); }, 0},
      {"relu", [](const Tensor& x) { return relu(x); }, 0},
      {"gelu", [](const Tensor& x) { return gelu(x); }, 4},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::kTanh); }, 4},
      {"tanh", [](const Tensor& x) { return tanh(x); }, 4},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, 4},
      {"silu", [](const Tensor& x) { return silu(x); }, 4},
      {"add_scalar", [](const Tensor& x) { return x + 0.3; }, 0},
      {"rsub_scalar", [](const Tensor& x) { return 1.0 - x; }, 0},
      {"mul_scalar", [](const Tensor& x) { return x * -1.7; }, 0},
      {"div_scalar", [](const Tensor& x) { return x / 3.0; }, 0},
      {"square", [](const Tensor& x) { return pow(x, 2.0); }, 0},
      // CUDA's powf is within 4 ulp (glibc's within 1): up to 5 apart, rounded up to 8.
      {"pow_scalar", [](const Tensor& x) { return pow(x, 1.5); }, 8, 0.01, 4.0},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 1.0); }, 0},
  };
}

// 16-bit results: both sides compute in f32 and round once, so exact ops agree exactly and ops with
// a few f32 ulps of difference can land on neighbouring 16-bit values (1 ulp).
int64_t ulps_for(DType dt, int64_t f32_ulps) { return dt == DType::kF32 ? f32_ulps : (f32_ulps > 0 ? 1 : 0); }

TEST(CudaElementwise, UnaryOpsMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : kDtypes) {
      for (const auto& [layout, x] : layouts(dt, 101, c.low, c.high)) {
        // Exact ops: exact. Transcendental ones: the ulps above, or 5e-7 absolute where the formula
        // cancels (gelu's x (1 + erf) / 2 and x (1 + tanh) / 2 for negative x: an intermediate near 1
        // off by 2 ulp, ~2.4e-7, times |x| / 2 <= 1.5).
        const double atol = c.ulps > 0 ? 5e-7 : 0.0;
        EXPECT_TRUE(testing::within_ulps_or_abs(c.fn(x), c.fn(on_cuda(x)), ulps_for(dt, c.ulps), atol))
            << c.name << " " << dtype_name(dt) << " " << layout;
      }
    }
  }
}

TEST(CudaElementwise, UnaryBackwardMatchesCpu) {
  MT_SKIP_WITHOUT_CUDA();
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : kDtypes) {
      Tensor x = random_tensor({33, 65}, dt, 102, c.low, c.high);
      const Tensor g = random_tensor({33, 65}, dt, 103);
      x.set_requires_grad(true);
      c.fn(x).backward(g);
      Tensor xd = on_cuda(x.detach());
      xd.set_requires_grad(true);
      c.fn(xd).backward(on_cuda(g));
      // The backward formula is the same; the saved value it reads (an exp, tanh, ...) may already
      // differ by the forward's ulps, and the formula adds a few roundings: twice the forward's bound,
      // or 2e-6 absolute where it cancels (tanh's and sigmoid's 1 - r near |r| = 1, gelu's Phi;
      // |g| <= 2 scales the forward's 5e-7 up).
      const double atol = c.ulps > 0 ? 2e-6 : 0.0;
      EXPECT_TRUE(testing::within_ulps_or_abs(x.grad(), xd.grad(), ulps_for(dt, 2 * c.ulps), atol))
          << c.name << " backward " << dtype_name(dt);
    }
  }
}

TEST(CudaElementwise, BinaryOpsWithBroadcastMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
  };
  for (DType dt : kDtypes) {
    // a [4, 1, 33] against b [7, 33] (both broadcast), a scalar tensor, and a transposed operand.
    const Tensor a = random_tensor({4, 1, 33}, dt, 104), b = random_tensor({7, 33}, dt, 105, 0.5, 2.0);
    const Tensor s = random_tensor({}, dt, 106, 0.5, 2.0);
    const Tensor bt = random_tensor({33, 7}, dt, 107, 0.5, 2.0).t();
    for (const auto& [name, fn] : ops) {
      // +, -, *, / are IEEE operations rounded once on both backends: exact.
      EXPECT_TRUE(within_ulps(fn(a, b), fn(on_cuda(a), on_cuda(b)), 0)) << name << " " << dtype_name(dt);
      EXPECT_TRUE(within_ulps(fn(b, s), fn(on_cuda(b), on_cuda(s)), 0)) << name << " scalar " << dtype_name(dt);
      EXPECT_TRUE(within_ulps(fn(b, bt), fn(on_cuda(b), on_cuda(bt)), 0)) << name << " transposed " << dtype_name(dt);
    }
    // powf: CUDA's within 4 ulp, glibc's within 1.
    EXPECT_TRUE(within_ulps(pow(b, a), pow(on_cuda(b), on_cuda(a)), ulps_for(dt, 8))) << "pow " << dtype_name(dt);
  }
  // Mixed dtypes promote as on the CPU (f16 + f32 -> f32).
  const Tensor h = random_tensor({5, 6}, DType::kF16, 108), f = random_tensor({6}, DType::kF32, 109);
  EXPECT_TRUE(within_ulps(h + f, on_cuda(h) + on_cuda(f), 0));
}

TEST(CudaElementwise, BinaryBackwardReducesBroadcastGrads) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : kDtypes) {
    Tensor a = random_tensor({4, 1, 33}, dt, 110), b = random_tensor({7, 33}, dt, 111, 0.5, 2.0);
    const Tensor g = random_tensor({4, 7, 33}, dt, 112);
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    (a * b / (a + b)).backward(g);
    Tensor ad = on_cuda(a.detach()), bd = on_cuda(b.detach());
    ad.set_requires_grad(true);
    bd.set_requires_grad(true);
    (ad * bd / (ad + bd)).backward(on_cuda(g));
    // The elementwise parts are exact; the broadcast dims are summed (sum_to) in a different order on
    // the GPU, so the gradients agree to the summation error of 7 or 4 terms.
    const double tol = dt == DType::kF32 ? 1e-5 : (dt == DType::kF16 ? 2e-3 : 1.6e-2);
    EXPECT_TRUE(testing::within_rel(a.grad(), ad.grad(), tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(testing::within_rel(b.grad(), bd.grad(), tol, tol)) << dtype_name(dt);
  }
}

TEST(CudaElementwise, ComparisonsWhereMaskedFillClamp) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : kDtypes) {
    const Tensor a = random_tensor({9, 17}, dt, 113), b = random_tensor({17}, dt, 114);
    const Tensor ad = on_cuda(a), bd = on_cuda(b);
    // Comparisons and selections move or compare values without arithmetic: exact.
    EXPECT_TRUE(within_ulps(lt(a, b).to(DType::kF32), lt(ad, bd).to(DType::kF32), 0)) << dtype_name(dt);
    EXPECT_TRUE(within_ulps(ge(a, 0.25).to(DType::kF32), ge(ad, 0.25).to(DType::kF32), 0)) << dtype_name(dt);
    EXPECT_TRUE(within_ulps(eq(a, a.t().contiguous().t()).to(DType::kF32), eq(ad, ad).to(DType::kF32), 0));
    const Tensor cond = gt(a, b);
    EXPECT_TRUE(within_ulps(where(cond, a, b), where(on_cuda(cond), ad, bd), 0)) << dtype_name(dt);
    EXPECT_TRUE(within_ulps(masked_fill(a, cond, -1e4), masked_fill(ad, on_cuda(cond), -1e4), 0)) << dtype_name(dt);
    EXPECT_TRUE(within_ulps(clamp(a, std::nullopt, 0.5), clamp(ad, std::nullopt, 0.5), 0)) << dtype_name(dt);
  }
  // i64 comparisons.
  const Tensor i = arange(0.0, 20.0), j = full({20}, 7.0, {.dtype = DType::kI64});
  EXPECT_TRUE(within_ulps(le(i, j).to(DType::kF32), le(on_cuda(i), on_cuda(j)).to(DType::kF32), 0));
}

TEST(CudaElementwise, AddcmulAddcdivForwardAndBackward) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : kDtypes) {
    Tensor s = random_tensor({6, 9}, dt, 115), t1 = random_tensor({9}, dt, 116);
    Tensor t2 = random_tensor({6, 1}, dt, 117, 0.5, 2.0);
    for (bool is_div : {false, true}) {
      auto fn = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
        return is_div ? addcdiv(a, b, c, 0.3) : addcmul(a, b, c, 0.3);
      };
      Tensor sd = on_cuda(s.detach()), t1d = on_cuda(t1.detach()), t2d = on_cuda(t2.detach());
      s = s.detach();
      t1 = t1.detach();
      t2 = t2.detach();
      for (Tensor* p : {&s, &t1, &t2, &sd, &t1d, &t2d}) p->set_requires_grad(true);
      // The forward is the CPU's formula, its product fused into the add on both devices: exact.
      const Tensor y = fn(s, t1, t2), yd = fn(sd, t1d, t2d);
      EXPECT_TRUE(within_ulps(y, yd, 0)) << dtype_name(dt) << is_div;
      const Tensor g = random_tensor({6, 9}, dt, 118);
      y.backward(g);
      yd.backward(on_cuda(g));
      // Broadcast inputs' gradients are summed over 6 or 9 terms in another order: summation bounds.
      const double tol = dt == DType::kF32 ? 1e-5 : (dt == DType::kF16 ? 2e-3 : 1.6e-2);
      EXPECT_TRUE(within_ulps(s.grad(), sd.grad(), 0)) << dtype_name(dt);
      EXPECT_TRUE(testing::within_rel(t1.grad(), t1d.grad(), tol, tol)) << dtype_name(dt);
      EXPECT_TRUE(testing::within_rel(t2.grad(), t2d.grad(), tol, tol)) << dtype_name(dt);
    }
  }
}

// Contiguous views with a storage offset (the flat path, whose 16-byte vectors need every pointer aligned):
// offsets that keep and that break the alignment, in either input, at an odd length (a scalar tail),
// through the public ops. Exact operations, so the bits must equal the CPU's.
TEST(CudaElementwise, OffsetViewsOfOddLengthMatchCpuExactly) {
  MT_SKIP_WITHOUT_CUDA();
  constexpr int64_t kLen = 1031;
  for (DType dt : kDtypes) {
    const Tensor base = random_tensor({2 * kLen + 16}, dt, 350);
    const Tensor base_d = on_cuda(base);
    for (int64_t off_a : {0, 1, 4, 8}) {
      for (int64_t off_b : {0, 3, 8}) {
        const Tensor a = base.narrow(0, off_a, kLen), b = base.narrow(0, kLen + off_b, kLen);
        const Tensor ad = base_d.narrow(0, off_a, kLen), bd = base_d.narrow(0, kLen + off_b, kLen);
        ASSERT_TRUE(ad.is_contiguous() && bd.is_contiguous());
        const std::string what =
            std::string(dtype_name(dt)) + " offsets " + std::to_string(off_a) + ", " + std::to_string(off_b);
        EXPECT_TRUE(within_ulps(neg(a), neg(ad), 0)) << what;
        EXPECT_TRUE(within_ulps(add(a, b), add(ad, bd), 0)) << what;
        EXPECT_TRUE(within_ulps(lt(a, b), lt(ad, bd), 0)) << what;  // a bool output: vectors of 4-8 bytes
        EXPECT_TRUE(within_ulps(where(lt(a, b), a, b), where(lt(ad, bd), ad, bd), 0)) << what;
      }
    }
  }
}

#ifdef MANTISSA_WITH_CUDA
// The launchers straight on cudaMalloc'd buffers poisoned with 0xFF: aligned (vectorized), misaligned
// by one element (scalar path) and broadcast (strided path) must each write every output element.
TEST(CudaElementwise, LaunchersWriteEveryElementOfPoisonedOutput) {
  MT_SKIP_WITHOUT_CUDA();
  const int64_t n = 1000003;  // odd: a scalar tail after the vectors
  std::vector<float> host(static_cast<size_t>(n) + 1);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 1000) * 0.5f;
  void *in_raw = nullptr, *out_raw = nullptr;
  ASSERT_EQ(cudaMalloc(&in_raw, host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out_raw, host.size() * sizeof(float)), cudaSuccess);
  float* in = static_cast<float*>(in_raw);
  float* out = static_cast<float*>(out_raw);
  ASSERT_EQ(cudaMemcpy(in, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<float> back(host.size());
  for (int misalign = 0; misalign < 2; ++misalign) {
    ASSERT_EQ(cudaMemset(out, 0xFF, host.size() * sizeof(float)), cudaSuccess);
    gpu::ElementwiseLayout<1> l;
    l.numel = n;
    gpu::launch_unary<float>({gpu::UnaryOp::kNeg}, l, in + misalign, out + misalign, nullptr);
    ASSERT_EQ(cudaMemcpy(back.data(), out, back.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += back[i + misalign] != -host[i + misalign];
    EXPECT_EQ(wrong, 0) << "misalign " << misalign;
  }
  // Broadcast: out[r, c] = in[c] + in[c] over [1000, 1000] with the row stride 0.
  ASSERT_EQ(cudaMemset(out, 0xFF, host.size() * sizeof(float)), cudaSuccess);
  gpu::ElementwiseLayout<2> l;
  l.numel = 1000000;
  l.flat = false;
  l.ndim = 2;
  l.sizes[0] = l.sizes[1] = 1000;
  l.strides[0][0] = l.strides[1][0] = 1;
  gpu::launch_binary<float>({gpu::BinaryOp::kAdd}, l, in, in, out, nullptr);
  ASSERT_EQ(cudaMemcpy(back.data(), out, back.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  int64_t wrong = 0;
  for (int64_t i = 0; i < l.numel; ++i) wrong += back[i] != host[i % 1000] + host[i % 1000];
  EXPECT_EQ(wrong, 0);
  cudaFree(in);
  cudaFree(out);
}
#endif

}  // namespace
}  // namespace mantissa

// AutocastGuard state (nesting, exact restore, per thread, per device), which tensors are cast and which
// are not, the output dtypes the issue names, the weight-cast cache (once per region, no-grad then grad,
// no growth over 1,000 no-grad forwards, cleared at the outermost exit), and fp32 gradients for fp32
// masters through the cast.
#include "amp/autocast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include "framework/allocator.h"
#include "framework/autograd.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "ops/autocast.h"  // cast_inputs, policy_for, policy_table: autocast as the ops apply it
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "ops/softmax/softmax.h"

namespace mantissa {
namespace {

using amp::AutocastGuard;
using amp::AutocastOptions;

Tensor rnd(const Shape& shape, uint64_t seed, DType dtype = DType::kF32) {
  Generator g(seed);
  return randn(shape, {.dtype = DType::kF32}, &g).to(dtype);
}
Tensor leaf(const Shape& shape, uint64_t seed) {
  Tensor t = rnd(shape, seed);
  t.set_requires_grad(true);
  return t;
}

// Same dtype, shape and bytes.
bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ac = a.detach().contiguous(), bc = b.detach().contiguous();
  return std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
}

// ---- guard state ----

TEST(AutocastGuard, OffByDefaultAndRestoredExactlyWhenNested) {
  const DType outside_dtype = amp::lower_precision_dtype(DeviceType::kCPU);
  EXPECT_FALSE(amp::is_enabled(DeviceType::kCPU));
  {
    AutocastGuard outer({.dtype = DType::kBF16});
    EXPECT_TRUE(amp::is_enabled(DeviceType::kCPU));
    EXPECT_EQ(amp::lower_precision_dtype(DeviceType::kCPU), DType::kBF16);
    {
      AutocastGuard inner({.dtype = DType::kF16});
      EXPECT_TRUE(amp::is_enabled(DeviceType::kCPU));
      EXPECT_EQ(amp::lower_precision_dtype(DeviceType::kCPU), DType::kF16);
      {
        AutocastGuard off({.dtype = DType::kF16, .state = amp::AutocastState::kDisabled});
        EXPECT_FALSE(amp::is_enabled(DeviceType::kCPU));
        // Suspended: a lower-precision op runs in its inputs' dtype.
        EXPECT_EQ(mm(rnd({2, 3}, 1), rnd({3, 2}, 2)).dtype(), DType::kF32);
      }
      EXPECT_TRUE(amp::is_enabled(DeviceType::kCPU));
      EXPECT_EQ(mm(rnd({2, 3}, 1), rnd({3, 2}, 2)).dtype(), DType::kF16);
    }
    EXPECT_EQ(amp::lower_precision_dtype(DeviceType::kCPU), DType::kBF16);
    EXPECT_EQ(mm(rnd({2, 3}, 1), rnd({3, 2}, 2)).dtype(), DType::kBF16);
  }
  EXPECT_FALSE(amp::is_enabled(DeviceType::kCPU));
  EXPECT_EQ(amp::lower_precision_dtype(DeviceType::kCPU), outside_dtype);
  EXPECT_EQ(mm(rnd({2, 3}, 1), rnd({3, 2}, 2)).dtype(), DType::kF32);
}

TEST(AutocastGuard, RejectsANon16BitDtype) {
  try {
    AutocastGuard g({.dtype = DType::kF32});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AutocastGuard: dtype must be f16 or bf16, got f32"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(amp::is_enabled(DeviceType::kCPU));  // a guard that threw changed nothing
}

// autocast(enabled=use_amp) in an fp32 run: a disabled guard may name f32, and a guard nested in it without
// a dtype still gets the thread's 16-bit one.
TEST(AutocastGuard, ADisabledGuardMayNameF32) {
  const DType before = amp::lower_precision_dtype(DeviceType::kCPU);
  {
    AutocastGuard off({.dtype = DType::kF32, .state = amp::AutocastState::kDisabled});
    EXPECT_FALSE(amp::is_enabled(DeviceType::kCPU));
    EXPECT_EQ(mm(rnd({2, 3}, 1), rnd({3, 2}, 2)).dtype(), DType::kF32);
    AutocastGuard nested(amp::AutocastOptions{});
    EXPECT_EQ(amp::lower_precision_dtype(DeviceType::kCPU), before);
  }
  EXPECT_EQ(amp::lower_precision_dtype(DeviceType::kCPU), before);
}

// Without a dtype a guard takes the thread's current one for its device: PyTorch's defaults (bf16 on the
// CPU, f16 on CUDA) at the outermost guard, the outer guard's dtype inside it.
TEST(AutocastGuard, DefaultDtypeIsPerDeviceAsPyTorchs) {
  {
    AutocastGuard cpu;
    EXPECT_EQ(amp::lower_precision_dtype(DeviceType::kCPU), DType::kBF16);
    EXPECT_EQ(mm(rnd({2, 3}, 1), rnd({3, 2}, 2)).dtype(), DType::kBF16);
  }
  {
    AutocastGuard cuda({.device = DeviceType::kCUDA});
    EXPECT_EQ(amp::lower_precision_dtype(DeviceType::kCUDA), DType::kF16);
    EXPECT_EQ(amp::policy_device(DeviceType::kCUDA), DeviceType::kCUDA);
  }
  {
    AutocastGuard outer({.dtype = DType::kF16});
    AutocastGuard inner({.cache = amp::CacheMode::kDisabled});
    EXPECT_EQ(amp::lower_precision_dtype(DeviceType::kCPU), DType::kF16);
  }
  EXPECT_EQ(amp::lower_precision_dtype(DeviceType::kCPU), DType::kBF16);
}

TEST(AutocastGuard, StateIsPerThread) {
  AutocastGuard g({.dtype = DType::kF16});
  bool other_enabled = true;
  DType other_out = DType::kF16;
  std::thread t([&] {
    other_enabled = amp::is_enabled(DeviceType::kCPU);
    other_out = linear(rnd({2, 3}, 3), rnd({4, 3}, 4)).dtype();
  });
  t.join();
  EXPECT_FALSE(other_enabled);
  EXPECT_EQ(other_out, DType::kF32);
  // A guard in another thread does not reach this one either.
  std::thread u([] { AutocastGuard bf({.dtype = DType::kBF16}); });
  u.join();
  EXPECT_EQ(amp::lower_precision_dtype(DeviceType::kCPU), DType::kF16);
  EXPECT_EQ(linear(rnd({2, 3}, 3), rnd({4, 3}, 4)).dtype(), DType::kF16);
}

TEST(AutocastGuard, AppliesOnlyToItsDevice) {
  AutocastGuard cuda({.device = DeviceType::kCUDA, .dtype = DType::kF16});
  EXPECT_TRUE(amp::is_enabled(DeviceType::kCUDA));
  EXPECT_FALSE(amp::is_enabled(DeviceType::kCPU));
  // CPU tensors are not on the guard's device: untouched.
  EXPECT_EQ(linear(rnd({2, 3}, 5), rnd({4, 3}, 6)).dtype(), DType::kF32);
  EXPECT_EQ(softmax(rnd({2, 3}, 7, DType::kF16), 1).dtype(), DType::kF16);
}

// ---- what is cast ----

TEST(AutocastCasting, OutputDtypesNamedByTheIssue) {
  AutocastGuard g({.dtype = DType::kF16});
  EXPECT_EQ(linear(rnd({2, 3}, 1), rnd({4, 3}, 2), rnd({4}, 3)).dtype(), DType::kF16);
  // softmax is fp32 in PyTorch's CUDA lists and in none of its CPU lists.
  EXPECT_EQ(softmax(rnd({2, 3}, 4, DType::kF16), 1).dtype(), DType::kF16);
  {
    AutocastGuard cuda_lists({.policy_device = DeviceType::kCUDA});
    EXPECT_EQ(softmax(rnd({2, 3}, 4, DType::kF16), 1).dtype(), DType::kF32);
  }
  // add is in no category: ordinary promotion of f32 and f16.
  EXPECT_EQ(add(rnd({2, 3}, 5), rnd({2, 3}, 6, DType::kF16)).dtype(), DType::kF32);
  const Tensor logits = linear(rnd({4, 3}, 7), rnd({5, 3}, 8));
  ASSERT_EQ(logits.dtype(), DType::kF16);
  EXPECT_EQ(cross_entropy(logits, from_vector<int64_t>({0, 4, 2, 1})).dtype(), DType::kF32);
  // f64 is never cast, in any category.
  EXPECT_EQ(mm(rnd({2, 3}, 9, DType::kF64), rnd({3, 2}, 10, DType::kF64)).dtype(), DType::kF64);
  EXPECT_EQ(softmax(rnd({2, 3}, 11, DType::kF64), 1).dtype(), DType::kF64);
  EXPECT_EQ(cat({rnd({1, 2}, 12, DType::kF64), rnd({1, 2}, 13, DType::kF16)}).dtype(), DType::kF64);
  // Integer tensors are never cast: cat of i64 stays i64, the i64 target of cross_entropy is read as is.
  const Tensor ints = from_vector<int64_t>({1, 2, 3});
  EXPECT_EQ(cat({ints, ints}).dtype(), DType::kI64);
  const std::vector<Tensor> in = amp::cast_inputs("cross_entropy", {rnd({3, 4}, 14, DType::kF16), ints});
  EXPECT_EQ(in[0].dtype(), DType::kF32);
  EXPECT_TRUE(in[1].is_same(ints));
}

TEST(AutocastCasting, ATensorAlreadyInTheTargetDtypeIsNotCopied) {
  AutocastGuard g({.dtype = DType::kBF16});
  const Tensor a16 = rnd({2, 3}, 1, DType::kBF16), b32 = rnd({3, 4}, 2), f32 = rnd({2, 3}, 3);
  const std::vector<Tensor> low = amp::cast_inputs("mm", {a16, b32});
  EXPECT_TRUE(low[0].is_same(a16));  // the same handle, so the same storage
  EXPECT_EQ(low[0].data_ptr(), a16.data_ptr());
  EXPECT_EQ(low[1].dtype(), DType::kBF16);
  EXPECT_FALSE(low[1].shares_storage(b32));
  EXPECT_TRUE(amp::cast_input("cross_entropy", f32).is_same(f32));
  const std::vector<Tensor> promoted = amp::cast_inputs("cat", {f32, a16});
  EXPECT_TRUE(promoted[0].is_same(f32));
  EXPECT_EQ(promoted[1].dtype(), DType::kF32);
  // Undefined inputs (an absent bias) pass through.
  EXPECT_FALSE(amp::cast_inputs("linear", {f32, b32, Tensor()})[2].defined());
}

TEST(AutocastCasting, OpsOutsideTheTableAreUntouched) {
  AutocastGuard g({.dtype = DType::kF16});
  EXPECT_EQ(amp::policy_for("relu", DeviceType::kCPU), amp::CastPolicy::kNone);
  EXPECT_EQ(amp::policy_for("relu", DeviceType::kCUDA), amp::CastPolicy::kNone);
  const Tensor x = rnd({2, 3}, 1);
  EXPECT_TRUE(amp::cast_input("relu", x).is_same(x));
  EXPECT_EQ(relu(x).dtype(), DType::kF32);
  EXPECT_EQ(mean(x).dtype(), DType::kF32);
  EXPECT_EQ(mean(x.to(DType::kF16)).dtype(), DType::kF16);
}

// In-place ops are never autocast: they write into their destination's dtype, under a guard or not.
TEST(AutocastCasting, InPlaceOpsAreNeverAutocast) {
  AutocastGuard g({.dtype = DType::kBF16});
  Tensor dst = zeros({3});
  const Tensor src = from_vector<float>({1.0f / 3, 2.0f / 3, 1.0f});
  copy_(dst, src);
  EXPECT_EQ(dst.dtype(), DType::kF32);
  EXPECT_TRUE(bitwise_equal(dst, src));  // no bf16 round trip
  fill_(dst, 0.1);
  EXPECT_EQ(dst.to(DType::kF64).contiguous().data<double>()[0], static_cast<double>(0.1f));
  accumulate_(dst, src);
  EXPECT_EQ(dst.dtype(), DType::kF32);
}

// PyTorch refuses binary_cross_entropy under CUDA autocast and runs it in fp32 under CPU autocast.
TEST(AutocastCasting, BinaryCrossEntropyIsRefusedUnderCudaAutocastOnly) {
  const Tensor p = from_vector<float>({0.2f, 0.7f}), y = from_vector<float>({0.0f, 1.0f});
  {
    AutocastGuard g({.dtype = DType::kF16, .policy_device = DeviceType::kCUDA});
    try {
      binary_cross_entropy(p, y);
      FAIL() << "expected binary_cross_entropy to be refused under autocast";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("binary_cross_entropy: unsafe to autocast on CUDA"), std::string::npos) << msg;
      EXPECT_NE(msg.find("HINT: use binary_cross_entropy_with_logits"), std::string::npos) << msg;
    }
    // The with-logits form is the safe one: fp32 under autocast.
    EXPECT_EQ(binary_cross_entropy_with_logits(p.to(DType::kF16), y).dtype(), DType::kF32);
  }
  {
    AutocastGuard g({.dtype = DType::kF16});
    EXPECT_EQ(binary_cross_entropy(p.to(DType::kF16), y.to(DType::kF16)).dtype(), DType::kF32);
  }
  // Outside autocast it works: -(log 0.8 + log 0.7) / 2.
  EXPECT_NEAR(binary_cross_entropy(p, y).item(), -(std::log(0.8) + std::log(0.7)) / 2, 1e-6);  // f32 logs
}

// ---- the weight-cast cache ----

TEST(AutocastCache, WeightUsedInForwardAndInABackwardHookIsCastOncePerRegion) {
  const Tensor w = leaf({8, 6}, 1), x = rnd({4, 6}, 2);
  const uint64_t before = amp::weight_cast_count();
  Tensor from_hook;
  {
    AutocastGuard g({.dtype = DType::kBF16});
    Tensor h = linear(x, w);
    EXPECT_EQ(amp::weight_cast_count() - before, 1u);
    EXPECT_EQ(amp::cache_size(), 1u);
    // The hook runs inside backward (where the engine suspends autocast) and re-enters it.
    h.register_hook([&](const Tensor&) {
      EXPECT_FALSE(amp::is_enabled(DeviceType::kCPU));
      AutocastGuard again({.dtype = DType::kBF16});
      from_hook = linear(x, w);
      return Tensor();
    });
    sum(h).backward();
    EXPECT_EQ(amp::weight_cast_count() - before, 1u) << "the hook's linear must reuse the region's cast";
    EXPECT_EQ(amp::cache_size(), 1u);
  }
  EXPECT_EQ(amp::cache_size(), 0u);
  ASSERT_TRUE(from_hook.defined());
  EXPECT_EQ(from_hook.dtype(), DType::kBF16);
  EXPECT_EQ(w.grad().dtype(), DType::kF32);
}

TEST(AutocastCache, BackwardAfterTheRegionCastsOnceInTheHooksOwnRegion) {
  const Tensor w = leaf({8, 6}, 3), x = rnd({4, 6}, 4);
  const uint64_t before = amp::weight_cast_count();
  Tensor h;
  {
    AutocastGuard g({.dtype = DType::kF16});
    h = linear(x, w);
  }
  EXPECT_EQ(amp::cache_size(), 0u);
  int hook_calls = 0;
  h.register_hook([&](const Tensor&) {
    AutocastGuard again({.dtype = DType::kF16});
    linear(x, w);
    linear(x, w);  // twice in one region: still one cast
    ++hook_calls;
    return Tensor();
  });
  sum(h.to(DType::kF32)).backward();
  EXPECT_EQ(hook_calls, 1);
  EXPECT_EQ(amp::weight_cast_count() - before, 2u);  // one per region, two regions
  EXPECT_EQ(amp::cache_size(), 0u);
}

TEST(AutocastCache, NoGradForwardThenGradForwardStillYieldsGradients) {
  const Tensor w = leaf({5, 3}, 5), b = leaf({5}, 6), x = rnd({4, 3}, 7);
  const uint64_t before = amp::weight_cast_count();
  AutocastGuard g({.dtype = DType::kBF16});
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(linear(x, w, b).requires_grad());
  }
  const Tensor y = linear(x, w, b);  // reuses the casts made under no-grad: they carry history
  ASSERT_TRUE(y.requires_grad());
  EXPECT_EQ(amp::weight_cast_count() - before, 2u);  // w and b, once each
  sum(y).backward();
  ASSERT_TRUE(w.grad().defined());
  ASSERT_TRUE(b.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::kF32);
  EXPECT_EQ(b.grad().dtype(), DType::kF32);
  // d sum(x w^T + b) / db = the batch size for every output.
  EXPECT_EQ(b.grad().to(DType::kF64).contiguous().data<double>()[0], 4.0);
}

TEST(AutocastCache, AThousandNoGradForwardsGrowNoMemory) {
  const Tensor w = leaf({64, 32}, 8), b = leaf({64}, 9), x = rnd({16, 32}, 10);
  AutocastGuard g({.dtype = DType::kF16});
  {
    NoGradGuard no_grad;
    linear(x, w, b);  // the first forward fills the cache
  }
  const size_t cached = amp::cache_size();
  const uint64_t casts = amp::weight_cast_count();
  const uint64_t live = cpu_allocator_stats().allocated_bytes;
  for (int i = 0; i < 1000; ++i) {
    NoGradGuard no_grad;
    const Tensor y = linear(x, w, b);
    ASSERT_EQ(y.dtype(), DType::kF16);
  }
  EXPECT_EQ(cached, 2u);
  EXPECT_EQ(amp::cache_size(), cached);
  EXPECT_EQ(amp::weight_cast_count(), casts);
  EXPECT_EQ(cpu_allocator_stats().allocated_bytes, live);
}

TEST(AutocastCache, ClearedWhenTheOutermostGuardExits) {
  const Tensor w = leaf({4, 3}, 11), x = rnd({2, 3}, 12);
  {
    AutocastGuard outer({.dtype = DType::kF16});
    {
      AutocastGuard inner({.dtype = DType::kF16});
      linear(x, w);
      EXPECT_EQ(amp::cache_size(), 1u);
    }
    EXPECT_EQ(amp::cache_size(), 1u);  // an inner exit keeps the region's casts
    { AutocastGuard off({.state = amp::AutocastState::kDisabled}); }
    EXPECT_EQ(amp::cache_size(), 1u);  // so does a disabled guard's
  }
  EXPECT_EQ(amp::cache_size(), 0u);
}

TEST(AutocastCache, NestedF16AndBf16GuardsKeepOneCopyEach) {
  const Tensor w = leaf({4, 3}, 16), x = rnd({2, 3}, 17);
  const uint64_t before = amp::weight_cast_count();
  AutocastGuard outer({.dtype = DType::kBF16});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(linear(x, w).dtype(), DType::kBF16);
    AutocastGuard inner({.dtype = DType::kF16});
    EXPECT_EQ(linear(x, w).dtype(), DType::kF16);
  }
  EXPECT_EQ(amp::weight_cast_count() - before, 2u);
  EXPECT_EQ(amp::cache_size(), 2u);
}

TEST(AutocastCache, OnlyFp32LeavesThatRequireGradAreCached) {
  AutocastGuard g({.dtype = DType::kF16});
  const Tensor plain = rnd({4, 3}, 13), x = rnd({2, 3}, 14), w = leaf({4, 3}, 15);
  linear(x, plain);        // no requires_grad: not cached
  linear(x, mul(w, 2.0));  // not a leaf: not cached
  EXPECT_EQ(amp::cache_size(), 0u);
  {
    AutocastGuard no_cache({.dtype = DType::kF16, .cache = amp::CacheMode::kDisabled});
    linear(x, w);
    EXPECT_EQ(amp::cache_size(), 0u);
  }
  linear(x, w);
  EXPECT_EQ(amp::cache_size(), 1u);  // the cache setting came back with the outer guard's
}

// ---- gradients through the cast ----

TEST(AutocastGradients, Fp32MastersReceiveFp32GradientsEqualToTheHandCastPath) {
  for (DType low : {DType::kF16, DType::kBF16}) {
    const Tensor w = leaf({6, 5}, 20), b = leaf({6}, 21), x = leaf({3, 5}, 22);
    const Tensor target = from_vector<int64_t>({0, 5, 2});
    {
      AutocastGuard g({.dtype = low});
      cross_entropy(relu(linear(x, w, b)), target).backward();
    }
    // The same computation with the casts written out, no autocast.
    const Tensor w2 = leaf({6, 5}, 20), b2 = leaf({6}, 21), x2 = leaf({3, 5}, 22);
    cross_entropy(relu(linear(x2.to(low), w2.to(low), b2.to(low))).to(DType::kF32), target).backward();
    for (const auto& [got, want] : {std::pair{w, w2}, std::pair{b, b2}, std::pair{x, x2}}) {
      EXPECT_EQ(got.grad().dtype(), DType::kF32);
      EXPECT_TRUE(bitwise_equal(got.grad(), want.grad())) << dtype_name(low);
    }
  }
}

}  // namespace
}  // namespace mantissa

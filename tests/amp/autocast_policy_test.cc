// Every op in amp::policy_table(), driven by the table itself, for both devices' categories (a CPU guard
// with policy_device kCUDA applies the CUDA ones): under f16 and bf16 guards each op's output has its
// category's dtype and equals, bit for bit, the same op run without autocast on inputs cast by hand (for
// kNone: on its inputs as given). An op in the table without a case here fails the test. The categories
// themselves are pinned by tests/amp/autocast_table_test.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "ops/attention/attention.h"
#include "ops/autocast.h"  // cast_inputs, policy_for, policy_table: autocast as the ops apply it
#include "ops/conv/conv.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/norm/norm.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "ops/softmax/softmax.h"

namespace mantissa {
namespace {

using amp::CastPolicy;
using In = std::vector<Tensor>;

struct PolicyCase {
  std::function<Tensor(const In&)> run;
  In inputs;  // as handed to the op; eligible ones get cast by the policy
};

Tensor rnd(const Shape& shape, uint64_t seed, DType dtype, double low = -2.0, double high = 2.0) {
  Generator g(seed);
  return add(mul(rand(shape, {.dtype = DType::kF32}, &g), high - low), low).to(dtype);
}
Tensor positive(const Shape& shape, uint64_t seed, DType dtype) { return rnd(shape, seed, dtype, 0.5, 2.0); }
Tensor index(std::vector<int64_t> v, const Shape& shape) { return from_vector<int64_t>(v, shape); }

constexpr DType kF16 = DType::kF16, kBF16 = DType::kBF16, kF32 = DType::kF32;

// One case per op in the table. Lower-precision ops get f32 inputs (autocast lowers them); fp32 ops get
// 16-bit inputs (autocast widens them); promote ops get mixed f16/f32 inputs; integer indices and
// targets ride along untouched.
std::map<std::string, PolicyCase> cases() {
  std::map<std::string, PolicyCase> c;
  // Lower precision.
  c["matmul"] = {[](const In& x) { return matmul(x[0], x[1]); }, {rnd({2, 3, 4}, 1, kF32), rnd({4, 5}, 2, kF32)}};
  c["mm"] = {[](const In& x) { return mm(x[0], x[1]); }, {rnd({3, 4}, 3, kF32), rnd({4, 5}, 4, kF32)}};
  c["bmm"] = {[](const In& x) { return bmm(x[0], x[1]); }, {rnd({2, 3, 4}, 5, kF32), rnd({2, 4, 5}, 6, kF32)}};
  c["linear"] = {[](const In& x) { return linear(x[0], x[1], x[2]); },
                 {rnd({3, 4}, 7, kF32), rnd({5, 4}, 8, kF32), rnd({5}, 9, kF32)}};
  c["addmm"] = {[](const In& x) { return addmm(x[0], x[1], x[2], 0.5, 2.0); },
                {rnd({5}, 10, kF32), rnd({3, 4}, 11, kF32), rnd({4, 5}, 12, kF32)}};
  c["baddbmm"] = {[](const In& x) { return baddbmm(x[0], x[1], x[2]); },
                  {rnd({2, 3, 5}, 13, kF32), rnd({2, 3, 4}, 14, kF32), rnd({2, 4, 5}, 15, kF32)}};
  c["conv1d"] = {[](const In& x) { return conv1d(x[0], x[1], x[2], {.padding = 1}); },
                 {rnd({2, 3, 8}, 16, kF32), rnd({4, 3, 3}, 17, kF32), rnd({4}, 18, kF32)}};
  c["conv2d"] = {[](const In& x) { return conv2d(x[0], x[1], x[2]); },
                 {rnd({1, 2, 5, 5}, 19, kF32), rnd({3, 2, 3, 3}, 20, kF32), rnd({3}, 21, kF32)}};
  c["scaled_dot_product_attention"] = {
      [](const In& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.mask = AttentionMask::kCausal}); },
      {rnd({2, 4, 8}, 22, kF32), rnd({2, 4, 8}, 23, kF32), rnd({2, 4, 8}, 24, kF32)}};
  // fp32.
  c["exp"] = {[](const In& x) { return exp(x[0]); }, {rnd({3, 4}, 30, kF16)}};
  c["log"] = {[](const In& x) { return log(x[0]); }, {positive({3, 4}, 31, kBF16)}};
  c["rsqrt"] = {[](const In& x) { return rsqrt(x[0]); }, {positive({3, 4}, 57, kF16)}};
  c["pow"] = {[](const In& x) { return pow(x[0], x[1]); }, {positive({3, 4}, 32, kF16), rnd({4}, 33, kF16)}};
  c["softmax"] = {[](const In& x) { return softmax(x[0], 1); }, {rnd({3, 4}, 34, kF16)}};
  c["log_softmax"] = {[](const In& x) { return log_softmax(x[0], 0); }, {rnd({3, 4}, 35, kBF16)}};
  c["layer_norm"] = {[](const In& x) { return layer_norm(x[0], {4}, x[1], x[2]); },
                     {rnd({3, 4}, 36, kF16), rnd({4}, 37, kF16), rnd({4}, 38, kF32)}};
  c["group_norm"] = {[](const In& x) { return group_norm(x[0], 2, x[1], x[2]); },
                     {rnd({2, 4, 3}, 39, kBF16), rnd({4}, 40, kBF16), rnd({4}, 41, kBF16)}};
  c["sum"] = {[](const In& x) { return sum(x[0], {1}); }, {rnd({3, 4}, 42, kF16)}};
  c["cumsum"] = {[](const In& x) { return cumsum(x[0], 1); }, {rnd({3, 40}, 43, kBF16)}};
  c["prod"] = {[](const In& x) { return prod(x[0], 0); }, {rnd({6, 3}, 44, kF16)}};
  c["norm"] = {[](const In& x) { return norm(x[0], {.dims = {1}}); }, {rnd({3, 50}, 45, kF16)}};
  c["logsumexp"] = {[](const In& x) { return logsumexp(x[0], {1}); }, {rnd({3, 4}, 46, kBF16)}};
  c["cross_entropy"] = {[](const In& x) { return cross_entropy(x[0], x[1]); },
                        {rnd({4, 5}, 47, kF16), index({0, 4, 2, 1}, {4})}};
  c["nll_loss"] = {[](const In& x) { return nll_loss(x[0], x[1], {.reduction = Reduction::kSum}); },
                   {rnd({4, 5}, 48, kBF16), index({3, 0, 2, 1}, {4})}};
  c["mse_loss"] = {[](const In& x) { return mse_loss(x[0], x[1]); }, {rnd({3, 4}, 49, kF16), rnd({3, 4}, 50, kF16)}};
  c["l1_loss"] = {[](const In& x) { return l1_loss(x[0], x[1]); }, {rnd({3, 4}, 51, kF16), rnd({3, 4}, 52, kF16)}};
  c["smooth_l1_loss"] = {[](const In& x) { return smooth_l1_loss(x[0], x[1], {.reduction = Reduction::kNone}); },
                         {rnd({3, 4}, 53, kBF16), rnd({3, 4}, 54, kBF16)}};
  c["binary_cross_entropy_with_logits"] = {[](const In& x) { return binary_cross_entropy_with_logits(x[0], x[1]); },
                                           {rnd({3, 4}, 55, kF16), rnd({3, 4}, 56, kF16, 0.0, 1.0)}};
  // Promote.
  c["addcmul"] = {[](const In& x) { return addcmul(x[0], x[1], x[2], 0.5); },
                  {rnd({3, 4}, 60, kF16), rnd({3, 4}, 61, kF32), rnd({4}, 62, kF16)}};
  c["addcdiv"] = {[](const In& x) { return addcdiv(x[0], x[1], x[2], -2.0); },
                  {rnd({3, 4}, 63, kF32), rnd({3, 4}, 64, kF16), positive({3, 4}, 65, kF16)}};
  c["dot"] = {[](const In& x) { return dot(x[0], x[1]); }, {rnd({7}, 66, kF16), rnd({7}, 67, kF32)}};
  c["cat"] = {[](const In& x) { return cat({x[0], x[1]}, 0); }, {rnd({2, 3}, 68, kF16), rnd({1, 3}, 69, kF32)}};
  c["stack"] = {[](const In& x) { return stack({x[0], x[1]}, 1); }, {rnd({2, 3}, 70, kBF16), rnd({2, 3}, 71, kF32)}};
  c["index_put"] = {[](const In& x) { return index_put(x[0], x[1], x[2], IndexPutMode::kAccumulate); },
                    {rnd({4, 3}, 72, kF16), index({2, 0, 2}, {3}), rnd({3, 3}, 73, kF32)}};
  c["scatter_add"] = {[](const In& x) { return scatter_add(x[0], 1, x[1], x[2]); },
                      {rnd({2, 4}, 74, kF32), index({0, 3, 3, 1, 1, 2}, {2, 3}), rnd({2, 3}, 75, kBF16)}};
  // Refused.
  c["binary_cross_entropy"] = {[](const In& x) { return binary_cross_entropy(x[0], x[1]); },
                               {rnd({3, 4}, 80, kF16, 0.1, 0.9), rnd({3, 4}, 81, kF16, 0.0, 1.0)}};
  return c;
}

bool eligible(const Tensor& t) { return t.defined() && is_floating(t.dtype()) && t.dtype() != DType::kF64; }

// The inputs cast by hand as the policy says, and the dtype the op's output must then have.
In cast_by_hand(CastPolicy policy, const In& inputs, DType low) {
  DType target = low;
  if (policy == CastPolicy::kFp32) target = kF32;
  if (policy == CastPolicy::kPromote) {
    bool any = false;
    for (const Tensor& t : inputs) {
      if (!eligible(t)) continue;
      target = any ? promote_types(target, t.dtype()) : t.dtype();
      any = true;
    }
  }
  In out;
  for (const Tensor& t : inputs) out.push_back(eligible(t) ? t.to(target) : t);
  return out;
}

DType expected_dtype(CastPolicy policy, const In& inputs, DType low) {
  if (policy == CastPolicy::kLowerPrecision) return low;
  if (policy == CastPolicy::kFp32) return kF32;
  return cast_by_hand(policy, inputs, low)[0].dtype();  // promote: the widest floating input
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
}

constexpr DeviceType kDevices[] = {DeviceType::kCPU, DeviceType::kCUDA};
const char* device_name(DeviceType d) { return d == DeviceType::kCUDA ? "CUDA" : "CPU"; }

// The op's output (or that it threw) under a CPU guard applying `lists`' categories.
struct Outcome {
  bool threw = false;
  Tensor out;
};
Outcome run(const PolicyCase& pc, const In& inputs, std::optional<amp::AutocastOptions> guard) {
  Outcome o;
  try {
    std::optional<amp::AutocastGuard> g;
    if (guard) g.emplace(*guard);
    o.out = pc.run(inputs);
  } catch (const Error&) {
    o.threw = true;
  }
  return o;
}

// The table's built-in ops: an op a test registered (amp::register_op, tests/ops/function_test.cc) has no
// case here, and is in the table when both tests run in one process.
std::vector<amp::PolicyEntry> builtin_policy_table() {
  std::vector<amp::PolicyEntry> table;
  for (const amp::PolicyEntry& entry : amp::policy_table()) {
    for (const OpInfo* info : all_ops()) {
      if (info->name == entry.op) table.push_back(entry);
    }
  }
  return table;
}

TEST(AutocastPolicy, EveryOpInTheTableHasItsCategorysDtypeAndEqualsTheHandCastOp) {
  const std::map<std::string, PolicyCase> all = cases();
  for (const amp::PolicyEntry& entry : builtin_policy_table()) {
    const std::string op(entry.op);
    const auto it = all.find(op);
    ASSERT_NE(it, all.end()) << "the policy table lists '" << op << "' but this test has no case for it";
    const PolicyCase& pc = it->second;
    for (DeviceType lists : kDevices) {
      const CastPolicy policy = entry.policy.on(lists);
      for (DType low : {kF16, kBF16}) {
        SCOPED_TRACE(op + " with the " + device_name(lists) + " categories under " + std::string(dtype_name(low)));
        const amp::AutocastOptions options{.dtype = low, .policy_device = lists};
        const Outcome got = run(pc, pc.inputs, options);
        if (policy == CastPolicy::kRefused) {
          EXPECT_TRUE(got.threw);
          continue;
        }
        if (policy == CastPolicy::kNone) {
          // Untouched: what the op does without autocast, a refusal of mixed dtypes included.
          const Outcome plain = run(pc, pc.inputs, std::nullopt);
          ASSERT_EQ(got.threw, plain.threw);
          if (!plain.threw) {
            EXPECT_TRUE(bitwise_equal(got.out, plain.out)) << "autocast changed an op it must not touch";
          }
          continue;
        }
        ASSERT_FALSE(got.threw);
        const Tensor want = pc.run(cast_by_hand(policy, pc.inputs, low));
        EXPECT_EQ(got.out.dtype(), expected_dtype(policy, pc.inputs, low));
        EXPECT_TRUE(bitwise_equal(got.out, want)) << "autocast and the hand-cast inputs differ";
      }
    }
  }
}

// A CPU guard without policy_device applies the CPU categories: the same as asking for them.
TEST(AutocastPolicy, ACpuGuardAppliesTheCpuCategories) {
  EXPECT_EQ(amp::policy_device(DeviceType::kCPU), DeviceType::kCPU);
  const std::map<std::string, PolicyCase> all = cases();
  const PolicyCase& softmax_case = all.at("softmax");  // CPU none, CUDA fp32
  Tensor cpu_lists, cuda_lists;
  {
    amp::AutocastGuard g({.dtype = kF16});
    EXPECT_EQ(amp::policy_device(DeviceType::kCPU), DeviceType::kCPU);
    cpu_lists = softmax_case.run(softmax_case.inputs);
    {
      amp::AutocastGuard inner({.policy_device = DeviceType::kCUDA});
      EXPECT_EQ(amp::policy_device(DeviceType::kCPU), DeviceType::kCUDA);
      EXPECT_EQ(amp::lower_precision_dtype(DeviceType::kCPU), kF16) << "an unset dtype is the outer guard's";
      cuda_lists = softmax_case.run(softmax_case.inputs);
    }
    EXPECT_EQ(amp::policy_device(DeviceType::kCPU), DeviceType::kCPU) << "the outer setting comes back";
  }
  EXPECT_EQ(cpu_lists.dtype(), kF16);
  EXPECT_EQ(cuda_lists.dtype(), kF32);
}

// The cases above are not vacuous: without autocast, each lower-precision or fp32 op's output dtype differs
// from its autocast output (otherwise the case would not test the policy).
TEST(AutocastPolicy, EveryCaseExercisesItsCast) {
  const std::map<std::string, PolicyCase> all = cases();
  for (const amp::PolicyEntry& entry : builtin_policy_table()) {
    for (DeviceType lists : kDevices) {
      const CastPolicy policy = entry.policy.on(lists);
      const PolicyCase& pc = all.at(std::string(entry.op));
      if (policy == CastPolicy::kLowerPrecision || policy == CastPolicy::kFp32) {
        const DType plain = pc.run(pc.inputs).dtype();
        EXPECT_NE(plain, expected_dtype(policy, pc.inputs, kF16)) << entry.op << " on " << device_name(lists);
      }
      // Promote (and none) ops get mixed f16 (or bf16) and f32 inputs, so a promotion has something to do.
      if (policy == CastPolicy::kPromote || policy == CastPolicy::kNone) {
        bool mixed = false, wide = false;
        for (const Tensor& t : pc.inputs) {
          mixed = mixed || (eligible(t) && t.dtype() != kF32);
          wide = wide || (eligible(t) && t.dtype() == kF32);
        }
        EXPECT_TRUE(policy == CastPolicy::kNone ? mixed : mixed && wide) << entry.op << " on " << device_name(lists);
      }
    }
  }
}

TEST(AutocastPolicy, NoCaseForAnOpOutsideTheTable) {
  for (const auto& [op, pc] : cases()) {
    EXPECT_TRUE(amp::policy_for(op, DeviceType::kCPU) != CastPolicy::kNone ||
                amp::policy_for(op, DeviceType::kCUDA) != CastPolicy::kNone)
        << op << " has a case but is not in the policy table";
  }
}

}  // namespace
}  // namespace mantissa

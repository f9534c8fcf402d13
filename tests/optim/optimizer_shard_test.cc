// Optimizer::shard (ZeRO-1's optimizer side) and clip_sharded_grad_norm_ in one process: an optimizer
// restricted to ranges of its parameters updates exactly those elements as the whole optimizer does and
// keeps state for them only; the sharded clipping norm, with the other "ranks'" partial lists added in,
// is the whole norm bit for bit; bad ranges and late calls are refused naming the parameter.
#include <gtest/gtest.h>

#include <cstring>

#include "framework/random.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/norm_order.h"

namespace mantissa {
namespace {

Tensor param(Shape shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, {}, &g).set_requires_grad(true);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.numel() == cb.numel() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

TEST(OptimizerShard, UpdatesItsRangesAsTheWholeOptimizerDoes) {
  Tensor a = param({6, 7}, 1), b = param({5}, 2), a2 = a.detach().clone().set_requires_grad(true),
         b2 = b.detach().clone().set_requires_grad(true);
  const AdamOptions o{.lr = 0.1, .weight_decay = 0.01};
  Adam whole({{"a", a}, {"b", b}}, o), part({{"a", a2}, {"b", b2}}, o);
  part.shard({{"a", {.begin = 10, .end = 30}}, {"b", {}}});  // b: another rank's
  ASSERT_EQ(part.group_params(0).size(), 1u);
  EXPECT_EQ(part.group_params(0)[0].tensor.shape(), (Shape{20}));
  Generator g(3);
  for (int step = 0; step < 3; ++step) {
    const Tensor ga = randn({6, 7}, {}, &g), gb = randn({5}, {}, &g);
    a.set_grad(ga.clone());
    b.set_grad(gb.clone());
    Tensor slice = part.group_params(0)[0].tensor;
    slice.set_grad(ga.view({42}).narrow(0, 10, 20).contiguous());
    whole.step();
    part.step();
  }
  // The range moved as the whole optimizer moved it; the rest of a2, and all of b2, did not move.
  EXPECT_TRUE(same_bits(a.view({42}).narrow(0, 10, 20), a2.view({42}).narrow(0, 10, 20)));
  const Tensor a_start = param({6, 7}, 1);
  EXPECT_TRUE(same_bits(a2.view({42}).narrow(0, 0, 10), a_start.view({42}).narrow(0, 0, 10)));
  EXPECT_TRUE(same_bits(b2, param({5}, 2)));
  // State for the range only: 20 elements per moment.
  const OptimizerState s = part.state_dict();
  EXPECT_EQ(s.tensors.at("a/exp_avg").shape(), (Shape{20}));
  EXPECT_TRUE(
      same_bits(s.tensors.at("a/exp_avg"), whole.state_dict().tensors.at("a/exp_avg").view({42}).narrow(0, 10, 20)));
  EXPECT_EQ(s.tensors.count("b/exp_avg"), 0u);
  EXPECT_EQ(part.state_names(0), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
}

TEST(OptimizerShard, RefusesBadRangesUnknownNamesAndLateCalls) {
  Tensor a = param({4}, 1);
  auto message = [&](const std::map<std::string, Optimizer::OwnedRange>& owned, bool stepped) {
    Adam adam({{"a", a}});
    if (stepped) {
      a.set_grad(ones({4}));
      adam.step();
    }
    try {
      adam.shard(owned);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"a", {.begin = 2, .end = 9}}}, false).find("range [2, 9) of parameter 'a' is outside its 4"),
            std::string::npos);
  EXPECT_NE(message({{"nope", {.begin = 0, .end = 1}}}, false).find("no parameter 'nope'"), std::string::npos);
  EXPECT_NE(message({{"a", {.begin = 0, .end = 2}}}, true).find("already holds state"), std::string::npos);
}

// Three "ranks" of a 40000-element grad and a 3-element one: each computes its blocks' partials, the lists
// are added, and every one of them gets the whole norm's bits and scales its slice by the same coefficient.
TEST(ClipShardedGradNorm, EqualsTheWholeNormBitForBit) {
  constexpr int64_t kBlock = norm_order::kBlock;
  Generator g(9);
  const Tensor big = randn({40000}, {}, &g), small = randn({3}, {}, &g);
  Tensor pb = zeros({40000}).set_requires_grad(true), ps = zeros({3}).set_requires_grad(true);
  pb.set_grad(big.clone());
  ps.set_grad(small.clone());
  const double whole = clip_grad_norm_(std::vector<Tensor>{pb, ps}, 1.0);
  // Rank 0: big[0, kBlock); rank 1: big[kBlock, 40000); rank 2: small.
  struct Piece {
    size_t param;
    int64_t begin, n;
  };
  const std::vector<int64_t> sizes{40000, 3};
  const std::vector<Piece> pieces{{0, 0, kBlock}, {0, kBlock, 40000 - kBlock}, {1, 0, 3}};
  std::vector<Tensor> lists;
  std::vector<Tensor> grads;
  for (const Piece& p : pieces) grads.push_back((p.param == 0 ? big : small).narrow(0, p.begin, p.n).clone());
  // Pass 1: each rank's own list (reduce keeps a copy); pass 2: the sum of all of them, as MPI would give.
  for (size_t r = 0; r < pieces.size(); ++r) {
    const GradSlice s{.grad = grads[r].clone(), .param = pieces[r].param, .begin = pieces[r].begin};
    (void)clip_sharded_grad_norm_(std::span(&s, 1), sizes, 1e30, NormType::kL2,
                                  [&](const Tensor& t) { lists.push_back(t.clone()); });
  }
  Tensor sum = lists[0].clone();
  for (size_t r = 1; r < lists.size(); ++r)
    for (int64_t i = 0; i < sum.numel(); ++i) sum.data<double>()[i] += lists[r].data<double>()[i];
  for (size_t r = 0; r < pieces.size(); ++r) {
    const GradSlice s{.grad = grads[r], .param = pieces[r].param, .begin = pieces[r].begin};
    const Tensor total =
        clip_sharded_grad_norm_(std::span(&s, 1), sizes, 1.0, NormType::kL2, [&](const Tensor& t) { copy_(t, sum); });
    EXPECT_EQ(total.item(), whole) << "rank " << r;
    const Tensor expected = (pieces[r].param == 0 ? pb : ps).grad().narrow(0, pieces[r].begin, pieces[r].n);
    EXPECT_TRUE(same_bits(grads[r], expected)) << "rank " << r << "'s slice scaled as the whole grad";
  }
  // A slice that splits a block is refused.
  const GradSlice bad{.grad = zeros({10}), .param = 0, .begin = 5};
  EXPECT_THROW(clip_sharded_grad_norm_(std::span(&bad, 1), sizes, 1.0, NormType::kL2, [](const Tensor&) {}), Error);
}

}  // namespace
}  // namespace mantissa

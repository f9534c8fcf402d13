// GPT model: shapes, nanoGPT parameter names and count, weight tying, gradients everywhere, overfitting
// a repeated sequence, bf16 autocast, and deterministic generation within block_size / top_k.
#include "models/gpt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "ops/elementwise/elementwise.h"
#include "ops/embedding/embedding.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "optim/adam.h"

namespace mantissa {
namespace {

GPTConfig tiny() { return {.vocab_size = 11, .n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8}; }

Tensor ids(const std::vector<int64_t>& v, int64_t B, int64_t T) { return from_vector<int64_t>(v, {B, T}); }

TEST(GptModel, LogitsShapeAndLoss) {
  Generator g(1);
  GPT m(tiny(), {.generator = &g});
  const Tensor idx = ids({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2, 5);
  const GPTOutput out = m.forward(idx);
  EXPECT_EQ(out.logits.shape(), (Shape{2, 5, 11}));
  EXPECT_FALSE(out.loss.defined());
  const GPTOutput with = m.forward(idx, idx);
  EXPECT_EQ(with.loss.dim(), 0);
  // nanoGPT's small init makes the logits near 0, so the loss starts near ln(vocab) = ln(11) = 2.40.
  EXPECT_NEAR(with.loss.item(), std::log(11.0), 0.2);
  EXPECT_THROW(m.forward(zeros({1, 9}, {.dtype = DType::kI64})), Error);  // longer than block_size
}

TEST(GptModel, ParameterNamesAndCountFormula) {
  const GPTConfig c = tiny();
  GPT m(c);
  const auto named = m.named_parameters();
  std::set<std::string> names;
  for (const auto& p : named) names.insert(p.name);
  EXPECT_EQ(named.front().name, "transformer.wte.weight");
  EXPECT_TRUE(names.count("transformer.wpe.weight"));
  EXPECT_TRUE(names.count("transformer.h.1.attn.c_attn.weight"));
  EXPECT_TRUE(names.count("transformer.h.0.mlp.c_proj.bias"));
  EXPECT_TRUE(names.count("transformer.ln_f.weight"));
  EXPECT_FALSE(names.count("lm_head.weight"));  // tied: listed once, under its first name
  const int64_t C = c.n_embd;
  EXPECT_EQ(m.num_parameters(), c.vocab_size * C + c.block_size * C + c.n_layer * (12 * C * C + 13 * C) + 2 * C);
  EXPECT_EQ(named.size(), 3u + 12u * static_cast<size_t>(c.n_layer) + 2u - 1u);  // wte wpe, 12 per block, ln_f
}

// The model's forward rebuilt from its parts, with the embedding use and the lm_head use of the tied
// weight each either live or detached, so each use's gradient can be taken alone.
Tensor loss_with_uses(GPT& m, const Tensor& idx, const Tensor& tgt, bool embed_live, bool head_live) {
  const Tensor w = m.wte->weight;
  Tensor x = embedding(embed_live ? w : w.detach(), idx) + m.wpe->forward(arange(static_cast<double>(idx.size(1))));
  for (auto& block : m.h) x = block->forward(x);
  const Tensor logits = linear(m.ln_f->forward(x), head_live ? w : w.detach());
  return cross_entropy(logits.reshape({-1, m.config().vocab_size}), tgt.reshape({-1}));
}

TEST(GptModel, WeightTyingSharesOneTensorAndAccumulatesBothGrads) {
  Generator g(2);
  GPT m(tiny(), {.generator = &g});
  EXPECT_TRUE(m.lm_head_weight.is_same(m.wte->weight));
  const Tensor idx = ids({1, 2, 3, 1}, 1, 4), tgt = ids({2, 3, 4, 5}, 1, 4);
  m.forward(idx, tgt).loss.backward();
  const Tensor both = m.wte->weight.grad().contiguous();
  m.zero_grad();
  loss_with_uses(m, idx, tgt, true, false).backward();
  const Tensor embed_only = m.wte->weight.grad().contiguous();
  m.zero_grad();
  loss_with_uses(m, idx, tgt, false, true).backward();
  const Tensor head_only = m.wte->weight.grad().contiguous();
  double embed_norm = 0.0, head_norm = 0.0;
  for (int64_t i = 0; i < both.numel(); ++i) {
    const float e = embed_only.data<float>()[i], h = head_only.data<float>()[i];
    embed_norm += std::abs(e);
    head_norm += std::abs(h);
    // The same float32 sums in the same order except for one final addition: a few ulps apart.
    EXPECT_NEAR(both.data<float>()[i], e + h, 1e-6 + 1e-5 * std::abs(e + h)) << i;
  }
  EXPECT_GT(embed_norm, 0.0);  // both uses contribute
  EXPECT_GT(head_norm, 0.0);
}

TEST(GptModel, GradientsReachEveryParameter) {
  Generator g(3);
  GPT m(tiny(), {.generator = &g});
  m.forward(ids({1, 2, 3, 4, 5, 6}, 2, 3), ids({2, 3, 4, 5, 6, 7}, 2, 3)).loss.backward();
  for (const auto& [name, p] : m.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    const Tensor gr = p.grad().contiguous();
    double norm = 0.0;
    for (int64_t i = 0; i < gr.numel(); ++i) norm += std::abs(gr.data<float>()[i]);
    EXPECT_GT(norm, 0.0) << name;
  }
}

TEST(GptModel, OverfitsARepeatedSequence) {
  Generator g(4);
  GPT m(tiny(), {.generator = &g});
  // 0 1 2 ... 7 repeated: each next token is fully determined by the current one.
  std::vector<int64_t> x, y;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 8; ++t) {
      x.push_back((t + b) % 8);
      y.push_back((t + b + 1) % 8);
    }
  }
  const Tensor idx = ids(x, 2, 8), tgt = ids(y, 2, 8);
  Adam opt(m.named_parameters(), {.lr = 1e-2});
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor loss = m.forward(idx, tgt).loss;
    loss.backward();
    if (step == 0) first = loss.item();
    last = loss.item();
    opt.step();
  }
  EXPECT_LT(last, 0.1 * first) << "first " << first << " last " << last;
  // Greedy generation from the start of the first training row continues it.
  const Tensor out = m.generate(from_vector<int64_t>({0, 1}), 6, {.temperature = 0.0}).contiguous();
  ASSERT_EQ(out.shape(), (Shape{8}));
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(out.data<int64_t>()[i], i) << i;
}

TEST(GptModel, DropoutActsInTrainingOnly) {
  GPTConfig with_dropout = tiny();
  with_dropout.dropout = 0.2;
  Generator g1(8), g2(8);
  GPT m(with_dropout, {.generator = &g1});
  GPT plain(tiny(), {.generator = &g2});  // the same initial values: init draws do not depend on dropout
  const Tensor idx = ids({1, 2, 3, 4, 5, 6}, 2, 3), tgt = ids({2, 3, 4, 5, 6, 7}, 2, 3);
  auto max_diff = [](const Tensor& a, const Tensor& b) {
    const Tensor x = a.contiguous(), y = b.contiguous();
    double d = 0.0;
    for (int64_t i = 0; i < x.numel(); ++i) d = std::max(d, double{std::abs(x.data<float>()[i] - y.data<float>()[i])});
    return d;
  };
  m.eval();
  plain.eval();
  EXPECT_EQ(max_diff(m.forward(idx).logits, plain.forward(idx).logits), 0.0);  // eval: dropout is the identity
  m.train();
  const Tensor t1 = m.forward(idx).logits, t2 = m.forward(idx).logits;
  EXPECT_GT(max_diff(t1, t2), 1e-4);  // fresh masks each call
  // Training with dropout (the explicit attention path) still reaches every parameter.
  m.forward(idx, tgt).loss.backward();
  for (const auto& [name, p] : m.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
}

TEST(GptModel, StateDictHasBothTiedNamesAndLoadsBack) {
  Generator g1(9), g2(10);
  GPT a(tiny(), {.generator = &g1}), b(tiny(), {.generator = &g2});
  std::set<std::string> names;
  for (const auto& t : a.state_dict()) names.insert(t.name);
  EXPECT_TRUE(names.count("lm_head.weight"));  // as in PyTorch's state_dict of a tied nanoGPT
  EXPECT_TRUE(names.count("transformer.wte.weight"));
  b.load_state_dict(a.state_dict());
  EXPECT_TRUE(b.lm_head_weight.is_same(b.wte->weight));  // loading copies in place: still tied
  const Tensor idx = ids({1, 2, 3}, 1, 3);
  const Tensor la = a.forward(idx).logits.contiguous(), lb = b.forward(idx).logits.contiguous();
  for (int64_t i = 0; i < la.numel(); ++i) EXPECT_EQ(la.data<float>()[i], lb.data<float>()[i]) << i;
}

TEST(GptModel, Bf16AutocastForwardAndBackward) {
  Generator g(5);
  GPT m(tiny(), {.generator = &g});
  amp::AutocastGuard guard({.dtype = DType::kBF16});
  const GPTOutput out = m.forward(ids({1, 2, 3, 4}, 1, 4), ids({2, 3, 4, 5}, 1, 4));
  EXPECT_EQ(out.logits.shape(), (Shape{1, 4, 11}));
  EXPECT_NEAR(out.loss.item(), std::log(11.0), 0.3);  // bf16 logits near 0: the loss is still ~ln(V)
  out.loss.backward();
  EXPECT_EQ(m.wte->weight.grad().dtype(), DType::kF32);  // grads land on the fp32 masters
}

// --recompute=blocks: with dropout and under bf16 autocast, the same loss and the same gradient on every
// parameter, bit for bit, as the plain model, and the dropout stream ends in the same place.
TEST(GptModel, RecomputedBlocksGiveTheSameGradientsBitForBit) {
  GPTConfig config = tiny();
  config.dropout = 0.2;
  GPTConfig checkpointed = config;
  checkpointed.recompute = true;
  Generator g1(12), g2(12);
  GPT plain(config, {.generator = &g1}), m(checkpointed, {.generator = &g2});
  const Tensor idx = ids({1, 2, 3, 4, 5, 6, 7, 8}, 2, 4), tgt = ids({2, 3, 4, 5, 6, 7, 8, 9}, 2, 4);
  Tensor plain_loss, loss;
  {
    amp::AutocastGuard guard({.dtype = DType::kBF16});
    plain_loss = plain.forward(idx, tgt).loss;
    loss = m.forward(idx, tgt).loss;
  }
  ASSERT_EQ(loss.item(), plain_loss.item());
  plain_loss.backward();
  loss.backward();
  EXPECT_TRUE(g1.state() == g2.state()) << "the recomputation moved the dropout stream";
  const auto a = plain.named_parameters(), b = m.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor ga = a[i].tensor.grad().contiguous(), gb = b[i].tensor.grad().contiguous();
    ASSERT_TRUE(ga.defined() && gb.defined()) << a[i].name;
    EXPECT_EQ(0, std::memcmp(ga.data<float>(), gb.data<float>(), sizeof(float) * ga.numel())) << a[i].name;
  }
}

TEST(GptModel, GenerateIsDeterministicAndRespectsBlockSizeAndTopK) {
  Generator init(6);
  GPT m(tiny(), {.generator = &init});
  const Tensor prompt = ids({1, 2, 3, 4, 5, 6}, 2, 3);
  Generator g1(42), g2(42);
  // 20 new tokens: the context (3 + 20) passes block_size 8, so cropping is exercised.
  const Tensor a = m.generate(prompt, 20, {.temperature = 1.0, .top_k = 3, .generator = &g1}).contiguous();
  const Tensor b = m.generate(prompt, 20, {.temperature = 1.0, .top_k = 3, .generator = &g2}).contiguous();
  ASSERT_EQ(a.shape(), (Shape{2, 23}));
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.data<int64_t>()[i], b.data<int64_t>()[i]) << i;
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(a.data<int64_t>()[i], i + 1);  // the prompt is kept
  EXPECT_TRUE(m.is_training());                                            // mode restored
  // top_k = 1 is greedy whatever the generator: equals temperature 0.
  Generator g3(7);
  const Tensor k1 = m.generate(prompt, 10, {.top_k = 1, .generator = &g3}).contiguous();
  const Tensor greedy = m.generate(prompt, 10, {.temperature = 0.0}).contiguous();
  for (int64_t i = 0; i < k1.numel(); ++i) EXPECT_EQ(k1.data<int64_t>()[i], greedy.data<int64_t>()[i]) << i;
  // Every sampled token lies among the top 3 of its step's logits.
  NoGradGuard ng;
  m.eval();
  for (int64_t t = 3; t < 23; ++t) {
    const int64_t start = std::max<int64_t>(0, t - 8);
    const Tensor logits = m.forward(a.slice(1, start, t)).logits.select(1, t - start - 1).contiguous();
    for (int64_t r = 0; r < 2; ++r) {
      const float* row = logits.data<float>() + r * 11;
      const float chosen = row[a.data<int64_t>()[r * 23 + t]];
      int64_t larger = 0;
      for (int64_t v = 0; v < 11; ++v) larger += row[v] > chosen;
      EXPECT_LT(larger, 3) << "row " << r << " step " << t;
    }
  }
}

}  // namespace
}  // namespace mantissa

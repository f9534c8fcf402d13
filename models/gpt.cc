// GPT (see gpt.h): blocks, forward with optional loss, nanoGPT's initialisation, and sampling.
#include "models/gpt.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/random.h"
#include "ops/attention/attention.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/recompute/recompute.h"
#include "ops/shape/shape.h"
#include "ops/softmax/softmax.h"

namespace mantissa {
namespace {

constexpr double kInitStd = 0.02;  // nanoGPT: N(0, 0.02) for Linear and Embedding weights

LinearOptions linear_options(const GPTOptions& o) { return {.dtype = o.dtype, .generator = o.generator}; }

// nanoGPT's _init_weights for one Linear: weight N(0, std), bias 0.
void init_linear(Linear& l, double stddev, Generator* g) {
  normal_(l.weight, 0.0, stddev, g);
  if (l.bias.defined()) fill_(l.bias, 0.0);
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c, const GPTOptions& o)
    : n_head(c.n_head), dropout_p(c.dropout), generator_(o.generator) {
  c_attn = register_module("c_attn", std::make_shared<Linear>(c.n_embd, 3 * c.n_embd, linear_options(o)));
  c_proj = register_module("c_proj", std::make_shared<Linear>(c.n_embd, c.n_embd, linear_options(o)));
  attn_dropout = register_module("attn_dropout", std::make_shared<Dropout>(DropoutOptions{c.dropout, o.generator}));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(DropoutOptions{c.dropout, o.generator}));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) { return forward_unhooked(in); });
}

Tensor CausalSelfAttention::forward_unhooked(const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / n_head;
  const std::vector<Tensor> qkv = split(c_attn->forward(x), C, 2);                             // 3 x [B, T, C]
  auto heads = [&](const Tensor& t) { return t.reshape({B, T, n_head, D}).transpose(1, 2); };  // [B, H, T, D]
  const Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  // One fused op, dropout on the weights included (it draws the words attn_dropout would draw).
  Tensor y = scaled_dot_product_attention(
      q, k, v, {.mask = AttentionMask::kCausal, .dropout_p = is_training() ? dropout_p : 0.0, .generator = generator_});
  y = y.transpose(1, 2).reshape({B, T, C});  // heads side by side again
  return resid_dropout->forward(c_proj->forward(y));
}

GPTMLP::GPTMLP(const GPTConfig& c, const GPTOptions& o) {
  c_fc = register_module("c_fc", std::make_shared<Linear>(c.n_embd, 4 * c.n_embd, linear_options(o)));
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * c.n_embd, c.n_embd, linear_options(o)));
  dropout = register_module("dropout", std::make_shared<Dropout>(DropoutOptions{c.dropout, o.generator}));
}

Tensor GPTMLP::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) {
    return dropout->forward(c_proj->forward(c_fc->forward_act(in, Activation::kGelu)));
  });
}

GPTBlock::GPTBlock(const GPTConfig& c, const GPTOptions& o) {
  const LayerNormOptions ln{.dtype = o.dtype};
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(Shape{c.n_embd}, ln));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c, o));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(Shape{c.n_embd}, ln));
  mlp = register_module("mlp", std::make_shared<GPTMLP>(c, o));
}

Tensor GPTBlock::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) {
    // The residual add after attention and ln_2 are one op (add_layer_norm): one pass over the stream.
    const AddLayerNorm h = ln_2->forward_add(in, attn->forward(ln_1->forward(in)));
    return h.sum + mlp->forward(h.out);
  });
}

GPT::GPT(GPTConfig config, GPTOptions o)
    : config_(config), dropout_generator_(o.generator != nullptr ? o.generator : &default_generator()) {
  const GPTConfig& c = config_;
  MT_CHECK(c.vocab_size > 0 && c.n_layer >= 0 && c.n_head > 0 && c.n_embd > 0 && c.block_size > 0,
           "GPT: sizes must be positive, got vocab_size ", c.vocab_size, " n_layer ", c.n_layer, " n_head ", c.n_head,
           " n_embd ", c.n_embd, " block_size ", c.block_size);
  MT_CHECK(c.n_embd % c.n_head == 0, "GPT: n_embd ", c.n_embd, " is not divisible by n_head ", c.n_head,
           ". HINT: each head gets n_embd / n_head channels");
  MT_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, "GPT: dropout must be in [0, 1), got ", c.dropout);
  // A plain container module gives the "transformer." prefix; "h" holds the blocks as "0", "1", ...
  auto transformer = register_module("transformer", std::make_shared<Module>());
  wte = transformer->register_module(
      "wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, EmbeddingOptions{o.dtype, o.generator}));
  wpe = transformer->register_module(
      "wpe", std::make_shared<Embedding>(c.block_size, c.n_embd, EmbeddingOptions{o.dtype, o.generator}));
  drop = transformer->register_module("drop", std::make_shared<Dropout>(DropoutOptions{c.dropout, o.generator}));
  auto blocks = transformer->register_module("h", std::make_shared<Module>());
  for (int64_t i = 0; i < c.n_layer; ++i) {
    h.push_back(blocks->register_module(std::to_string(i), std::make_shared<GPTBlock>(c, o)));
  }
  ln_f = transformer->register_module("ln_f",
                                      std::make_shared<LayerNorm>(Shape{c.n_embd}, LayerNormOptions{.dtype = o.dtype}));
  // Weight tying: lm_head.weight is wte.weight itself, so both uses accumulate into one grad.
  auto lm_head = register_module("lm_head", std::make_shared<Module>());
  lm_head_weight = lm_head->register_parameter("weight", wte->weight);

  // nanoGPT's initialisation: N(0, 0.02) everywhere, zero biases, and the residual projections scaled
  // by 1/sqrt(2 * n_layer) so the residual stream's variance does not grow with depth.
  normal_(wte->weight, 0.0, kInitStd, o.generator);
  normal_(wpe->weight, 0.0, kInitStd, o.generator);
  const double proj_std = kInitStd / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(c.n_layer, 1)));
  for (auto& b : h) {
    init_linear(*b->attn->c_attn, kInitStd, o.generator);
    init_linear(*b->attn->c_proj, proj_std, o.generator);
    init_linear(*b->mlp->c_fc, kInitStd, o.generator);
    init_linear(*b->mlp->c_proj, proj_std, o.generator);
  }
}

GPTOutput GPT::forward(const Tensor& idx, const Tensor& targets) {
  if (!has_hooks()) return forward_unhooked(idx, targets);
  // The hooks see inputs {idx, targets} and outputs {logits, loss} (undefined targets and loss when there
  // are no targets); a forward hook's replacement outputs come back as logits and loss, in that order.
  const std::vector<Tensor> out = call_hooked({idx, targets}, [this](const std::vector<Tensor>& in) {
    GPTOutput o = forward_unhooked(in[0], in[1]);
    return std::vector<Tensor>{std::move(o.logits), std::move(o.loss)};
  });
  return {.logits = out[0], .loss = out[1]};
}

GPTOutput GPT::forward_unhooked(const Tensor& idx, const Tensor& targets) {
  MT_CHECK(idx.dim() == 2 && idx.dtype() == DType::kI64, "GPT: expected token ids [B, T] i64, got ",
           shape_str(idx.shape()), " ", dtype_name(idx.dtype()));
  const int64_t B = idx.size(0), T = idx.size(1);
  MT_CHECK(T >= 1 && T <= config_.block_size, "GPT: sequence length ", T, " is outside [1, block_size ",
           config_.block_size, "]. HINT: crop the context to the last block_size tokens");
  const Tensor pos = arange(static_cast<double>(T)).to(idx.device());  // [T] i64, on the tokens' device
  // Two statements, so that wte runs before wpe (as in nanoGPT) and module hooks see the calls in that order:
  // the operands of one + may be evaluated in either order.
  const Tensor tok_emb = wte->forward(idx);  // [B, T, C]
  const Tensor pos_emb = wpe->forward(pos);  // [T, C]
  Tensor x = drop->forward(tok_emb + pos_emb);
  for (auto& block : h) {
    if (config_.recompute && GradMode::is_enabled()) {
      GPTBlock* b = block.get();
      x = recompute([b](const std::vector<Tensor>& in) { return std::vector<Tensor>{b->forward(in[0])}; }, {x},
                    {.generators = {dropout_generator_}})[0];
    } else {
      x = block->forward(x);
    }
  }
  GPTOutput out;
  out.logits = linear(ln_f->forward(x), lm_head_weight);  // [B, T, V]
  if (targets.defined()) {
    MT_CHECK(targets.shape() == idx.shape() && targets.dtype() == DType::kI64, "GPT: targets must be i64 ",
             shape_str(idx.shape()), " like idx, got ", shape_str(targets.shape()), " ", dtype_name(targets.dtype()));
    out.loss = cross_entropy(out.logits.reshape({B * T, config_.vocab_size}), targets.reshape({B * T}));
  }
  return out;
}

Tensor GPT::generate(const Tensor& prompt, int64_t n, GenerateOptions options) {
  MT_CHECK((prompt.dim() == 1 || prompt.dim() == 2) && prompt.dtype() == DType::kI64 && prompt.numel() > 0,
           "GPT.generate: expected a non-empty prompt [T] or [B, T] of i64 ids, got ", shape_str(prompt.shape()), " ",
           dtype_name(prompt.dtype()));
  MT_CHECK(n >= 0 && options.temperature >= 0.0 && options.top_k >= 0,
           "GPT.generate: n, temperature and top_k must be non-negative, got ", n, ", ", options.temperature, ", ",
           options.top_k);
  Generator& gen = options.generator ? *options.generator : default_generator();
  NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  // Tokens live on the model's device; the logits of the last position are read on the host to sample.
  const Device device = lm_head_weight.device();
  Tensor idx = (prompt.dim() == 1 ? prompt.unsqueeze(0) : prompt).to(device);
  const int64_t B = idx.size(0), V = config_.vocab_size;
  const int64_t k = options.top_k > 0 ? std::min(options.top_k, V) : V;
  std::vector<double> probs(static_cast<size_t>(V));
  std::vector<int64_t> next(static_cast<size_t>(B));
  for (int64_t step = 0; step < n; ++step) {
    const int64_t T = idx.size(1), start = std::max<int64_t>(0, T - config_.block_size);
    const Tensor cond = idx.slice(1, start, T);
    const Tensor last = forward(cond).logits.select(1, T - start - 1).to(DType::kF32).to(kCPU).contiguous();  // [B, V]
    const float* lp = last.data<float>();
    for (int64_t b = 0; b < B; ++b) {
      const float* row = lp + b * V;
      if (options.temperature == 0.0) {
        next[b] = std::max_element(row, row + V) - row;
        continue;
      }
      // The k-th largest logit is the cut: tokens below it get probability 0 (ties at the cut stay in).
      std::vector<float> sorted(row, row + V);
      std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
      const float cut = sorted[k - 1];
      const double top = *std::max_element(row, row + V);
      double total = 0.0;
      for (int64_t v = 0; v < V; ++v) {
        probs[v] = row[v] < cut ? 0.0 : std::exp((row[v] - top) / options.temperature);
        total += probs[v];
      }
      // Inverse-CDF sampling with one uniform draw per row.
      const double u = gen.uniform_double() * total;
      double acc = 0.0;
      int64_t chosen = -1;
      for (int64_t v = 0; v < V; ++v) {
        if (probs[v] == 0.0) continue;
        acc += probs[v];
        chosen = v;
        if (u < acc) break;
      }
      next[b] = chosen;
    }
    idx = cat({idx, from_vector<int64_t>(next, {B, 1}).to(device)}, 1);
  }
  if (was_training) train();
  idx = idx.to(prompt.device());  // returned where the prompt was
  return prompt.dim() == 1 ? idx.squeeze(0) : idx;
}

int64_t GPT::num_parameters() const {
  int64_t total = 0;
  for (const Tensor& p : parameters()) total += p.numel();
  return total;
}

}  // namespace mantissa

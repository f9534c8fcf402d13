// GPT: a decoder-only transformer in the style of nanoGPT. Token and position embeddings, n_layer pre-LN
// blocks (x + attn(ln_1(x)), x + mlp(ln_2(x))), a final LayerNorm and an lm_head tied to the token
// embedding. Parameter names are nanoGPT's: transformer.wte.weight, transformer.wpe.weight,
// transformer.h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.{weight, bias},
// transformer.ln_f.{weight, bias}; lm_head.weight is the same tensor as transformer.wte.weight and
// named_parameters() lists it once, under the first name (as PyTorch does).
// Parameter count: V*C + block_size*C + n_layer*(12*C^2 + 13*C) + 2*C.
#pragma once

#include <memory>
#include <vector>

#include "framework/generator.h"
#include "framework/module.h"
#include "models/layers/dropout.h"
#include "models/layers/embedding.h"
#include "models/layers/linear.h"
#include "models/layers/norm.h"

namespace mantissa {

struct GPTConfig {
  int64_t vocab_size = 65;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t block_size = 128;  // the longest context
  double dropout = 0.0;      // on the embeddings, attention weights, attention output and MLP output
                             // (training only), as nanoGPT
  // Activation checkpointing: each block keeps only its input for backward and runs again there
  // (ops/recompute/recompute.h). Same gradients bit for bit; less memory for one more forward of the blocks.
  bool recompute = false;
};

struct GPTOptions {
  DType dtype = DType::kF32;       // of the master parameters
  Generator* generator = nullptr;  // initial values and dropout masks; default_generator() when null
};

// Causal self-attention: one Linear c_attn makes q, k, v [B, n_head, T, C / n_head]; c_proj mixes heads.
// The attention itself is the fused scaled_dot_product_attention, with dropout on its weights in
// training (attn_dropout stays in the module tree, as nanoGPT's does, and names the probability).
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GPTConfig& config, const GPTOptions& options);
  std::string type_name() const override { return "CausalSelfAttention"; }
  Tensor forward(const Tensor& x);  // [B, T, C] -> [B, T, C]

  int64_t n_head;
  double dropout_p;
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> attn_dropout, resid_dropout;  // on the attention weights, after c_proj

 private:
  Generator* generator_;                     // the attention weights' dropout draws from it (null: default_generator())
  Tensor forward_unhooked(const Tensor& x);  // forward without the hooks around it
};

class GPTMLP : public Module {
 public:
  GPTMLP(const GPTConfig& config, const GPTOptions& options);
  std::string type_name() const override { return "MLP"; }
  Tensor forward(const Tensor& x);  // c_proj(gelu(c_fc(x))), C -> 4C -> C

  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> dropout;
};

class GPTBlock : public Module {
 public:
  GPTBlock(const GPTConfig& config, const GPTOptions& options);
  std::string type_name() const override { return "Block"; }
  Tensor forward(const Tensor& x);

  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<GPTMLP> mlp;
};

struct GPTOutput {
  Tensor logits;  // [B, T, vocab_size] f32 (the compute dtype under autocast)
  Tensor loss;    // 0-d mean cross entropy; undefined when no targets were given
};

struct GenerateOptions {
  double temperature = 1.0;        // logits are divided by it; 0 picks the most likely token (greedy)
  int64_t top_k = 0;               // sample among the k most likely tokens only; 0: all
  Generator* generator = nullptr;  // default_generator() when null
};

class GPT : public Module {
 public:
  explicit GPT(GPTConfig config, GPTOptions options = {});
  std::string type_name() const override { return "GPT"; }

  // idx [B, T] i64 with T <= block_size -> logits [B, T, V]; with targets [B, T] i64 also the mean
  // cross entropy over all B*T positions (targets of -100 are ignored, as in PyTorch). Hooks on the GPT see
  // inputs {idx, targets} and outputs {logits, loss}, an undefined tensor for each one absent.
  GPTOutput forward(const Tensor& idx, const Tensor& targets = Tensor());

  // Appends n sampled tokens to prompt [B, T0] (or [T0]) and returns [B, T0 + n] (or [T0 + n]). Runs
  // without grad and in eval mode (the mode is restored after); the context is cropped to the last
  // block_size tokens.
  Tensor generate(const Tensor& prompt, int64_t n, GenerateOptions options = {});

  int64_t num_parameters() const;
  const GPTConfig& config() const { return config_; }
  // Turns activation checkpointing of the blocks on or off (GPTConfig::recompute); the weights are the same.
  void set_recompute(bool on) { config_.recompute = on; }

  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::vector<std::shared_ptr<GPTBlock>> h;
  std::shared_ptr<LayerNorm> ln_f;
  Tensor lm_head_weight;  // the very tensor wte->weight, registered again as lm_head.weight

 private:
  GPTOutput forward_unhooked(const Tensor& idx, const Tensor& targets);  // forward without the hooks around it

  GPTConfig config_;
  Generator* dropout_generator_;  // what the dropout masks are drawn from, replayed by recompute
};

}  // namespace mantissa

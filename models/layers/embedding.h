// Embedding: a lookup table [num_embeddings, embedding_dim] indexed by i64 ids, as torch.nn.Embedding,
// initialised N(0, 1).
#pragma once

#include "framework/generator.h"
#include "framework/module.h"

namespace mantissa {

struct EmbeddingOptions {
  DType dtype = DType::kF32;
  Generator* generator = nullptr;  // default_generator() when null
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options = {});
  std::string type_name() const override { return "Embedding"; }
  // indices (i64, any shape) -> [*indices.shape, embedding_dim]
  Tensor forward(const Tensor& indices);

  int64_t num_embeddings, embedding_dim;
  Tensor weight;  // [num_embeddings, embedding_dim]
};

}  // namespace mantissa

// Embedding layer over ops/embedding/embedding.h.
#include "models/layers/embedding.h"

#include "framework/error.h"
#include "models/layers/init.h"
#include "ops/embedding/embedding.h"

namespace mantissa {

Embedding::Embedding(int64_t n, int64_t d, EmbeddingOptions options) : num_embeddings(n), embedding_dim(d) {
  MT_CHECK(n > 0 && d > 0, "Embedding: sizes must be positive, got num_embeddings ", n, " embedding_dim ", d);
  weight = register_parameter("weight", standard_normal({n, d}, options.dtype, options.generator));
}

Tensor Embedding::forward(const Tensor& indices) {
  return call_hooked(indices, [this](const Tensor& in) { return embedding(weight, in); });
}

}  // namespace mantissa

// embedding as a row gather over the flattened indices (ops/cpu/shape.h); its backward is a row
// scatter-add into a zero [V, D] gradient, accumulated in fp32 for 16-bit weights and rounded once.
#include "ops/embedding.h"

#include "framework/autograd.h"
#include "ops/cpu/shape.h"

#ifdef MANTISSA_WITH_CUDA
#include "framework/cuda/stream.h"
#include "ops/cuda/embedding_dropout.h"
#endif

namespace mantissa {
namespace {

struct EmbeddingBackward final : Node {
  SavedTensor indices{this, "indices"};  // contiguous i64, flattened
  Shape weight_shape;
  DType weight_dtype;
  std::string_view name() const override { return "EmbeddingBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor g = grads[0].contiguous();
    const Tensor& idx = indices.get();
#ifdef MANTISSA_WITH_CUDA
    if (g.device().is_cuda()) {
      // Atomic adds into a zeroed f32 (f64) table, rounded once to the weight's dtype.
      return {dispatch_floating(weight_dtype, name(), [&]<typename T>() {
        using C = compute_t<T>;
        Tensor acc = zeros(weight_shape, {.dtype = dtype_v<C>, .device = g.device()});
        gpu::DeviceGuard guard(g.device());
        gpu::launch_embedding_backward<T, C>(g.data<T>(), idx.data<int64_t>(), idx.numel(), weight_shape[0],
                                             weight_shape[1], acc.data<C>(), gpu::current_stream(g.device()));
        return acc.to(weight_dtype);
      })};
    }
#endif
    return {dispatch_floating(weight_dtype, name(), [&]<typename T>() {
      using C = compute_t<T>;
      Tensor acc = zeros(weight_shape, {.dtype = dtype_v<C>});
      const cpu::IndexGeometry geo{.outer = 1, .size = weight_shape[0], .inner = weight_shape[1]};
      cpu::index_add_rows<T, C>(g.data<T>(), idx.data<int64_t>(), idx.numel(), geo, acc.data<C>());
      return acc.to(weight_dtype);
    })};
  }
};

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  MT_CHECK(weight.defined() && indices.defined(), "embedding: weight and indices must be defined tensors");
  MT_CHECK(weight.dim() == 2, "embedding: expected a weight of shape [num_embeddings, embedding_dim], got ",
           shape_str(weight.shape()));
  MT_CHECK(is_floating(weight.dtype()), "embedding: expected a floating weight, got ", dtype_name(weight.dtype()));
  const int64_t vocab = weight.size(0), width = weight.size(1);
#ifdef MANTISSA_WITH_CUDA
  if (weight.device().is_cuda()) {
    MT_CHECK(indices.device() == weight.device(), "embedding: indices on ", indices.device().str(),
             " but weight on ", weight.device().str(), ". HINT: move the indices to the weight's device");
    MT_CHECK(indices.dtype() == DType::kI64 || indices.dtype() == DType::kI32,
             "embedding: expected integer indices (i64 or i32), got ", dtype_name(indices.dtype()));
    // Indices are not range-checked here (that would read them on the host); out-of-range ones give NaN rows.
    const Tensor idx = indices.to(DType::kI64).contiguous().reshape({-1});
    Shape out_shape = indices.shape();
    out_shape.push_back(width);
    const Tensor w = weight.contiguous();
    Tensor out = empty(out_shape, {.dtype = weight.dtype(), .device = weight.device()});
    gpu::DeviceGuard guard(weight.device());
    dispatch_floating(weight.dtype(), "embedding", [&]<typename T>() {
      gpu::launch_embedding_forward<T>(w.data<T>(), idx.data<int64_t>(), idx.numel(), vocab, width, out.data<T>(),
                                       gpu::current_stream(weight.device()));
    });
    if (compute_requires_grad({&weight})) {
      auto node = make_node<EmbeddingBackward>({&weight});
      node->indices = idx;
      node->weight_shape = weight.shape();
      node->weight_dtype = weight.dtype();
      set_history(out, node);
    }
    return out;
  }
#endif
  MT_CHECK(weight.device().is_cpu(), "embedding: no kernel for ", weight.device().str(), " in this build");
  const Tensor idx = cpu::checked_index(indices, vocab, "embedding", "an embedding table of num_embeddings")
                         .reshape({-1});
  Shape out_shape = indices.shape();
  out_shape.push_back(width);
  const Tensor w = weight.contiguous();
  Tensor out = empty(out_shape, {.dtype = weight.dtype(), .device = weight.device()});
  dispatch_floating(weight.dtype(), "embedding", [&]<typename T>() {
    cpu::index_select_rows<T>(w.data<T>(), idx.data<int64_t>(), idx.numel(),
                              {.outer = 1, .size = vocab, .inner = width}, out.data<T>());
  });
  if (compute_requires_grad({&weight})) {
    auto node = make_node<EmbeddingBackward>({&weight});
    node->indices = idx;
    node->weight_shape = weight.shape();
    node->weight_dtype = weight.dtype();
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa

// embedding as a row gather over the flattened indices (ops/shape/shape_cpu.h); its backward is a row
// scatter-add into a zero [V, D] gradient, accumulated in fp32 for 16-bit weights and rounded once.
#include "ops/embedding/embedding.h"

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "ops/embedding/embedding_cuda.h"
#include "ops/shape/shape.h"
#include "ops/shape/shape_cpu.h"

namespace mantissa {
namespace {

// The flattened i64 indices of a CPU table, range-checked.
Tensor cpu_embedding_index(const Tensor& weight, const Tensor& indices) {
  return cpu::checked_index(indices, weight.size(0), "embedding", "an embedding table of num_embeddings").reshape({-1});
}

// The flattened i64 indices of a device table: on its device, and not range-checked here (that would
// read them on the host); out-of-range ones give NaN rows.
Tensor device_embedding_index(const Tensor& weight, const Tensor& indices) {
  MT_CHECK(indices.device() == weight.device(), "embedding: indices on ", indices.device().str(), " but weight on ",
           weight.device().str(), ". HINT: move the indices to the weight's device");
  MT_CHECK(indices.dtype() == DType::kI64 || indices.dtype() == DType::kI32,
           "embedding: expected integer indices (i64 or i32), got ", dtype_name(indices.dtype()));
  return indices.to(DType::kI64).contiguous().reshape({-1});
}

void cpu_embedding(const Tensor& weight, const Tensor& idx, const Tensor& out) {
  dispatch_floating(weight.dtype(), "embedding", [&]<typename T>() {
    cpu::index_select_rows<T>(weight.data<T>(), idx.data<int64_t>(), idx.numel(),
                              {.outer = 1, .size = weight.size(0), .inner = weight.size(1)}, out.data<T>());
  });
}

Tensor cpu_embedding_backward(const Tensor& g, const Tensor& idx, const Shape& weight_shape, DType weight_dtype) {
  return dispatch_floating(weight_dtype, "EmbeddingBackward", [&]<typename T>() {
    using C = compute_t<T>;
    Tensor acc = zeros(weight_shape, {.dtype = dtype_v<C>});
    const cpu::IndexGeometry geo{.outer = 1, .size = weight_shape[0], .inner = weight_shape[1]};
    cpu::index_add_rows<T, C>(g.data<T>(), idx.data<int64_t>(), idx.numel(), geo, acc.data<C>());
    return acc.to(weight_dtype);
  });
}

// The device index check has no CUDA code of its own; the kernels do.
constexpr DeviceKernels<decltype(cpu_embedding_index)> kEmbeddingIndex{.cpu = &cpu_embedding_index,
                                                                       .cuda = &device_embedding_index};
constexpr DeviceKernels<decltype(cpu_embedding)> kEmbedding{.cpu = &cpu_embedding,
                                                            .cuda = MT_CUDA_KERNEL(cuda_embedding)};
constexpr DeviceKernels<decltype(cpu_embedding_backward)> kEmbeddingBackward{
    .cpu = &cpu_embedding_backward, .cuda = MT_CUDA_KERNEL(cuda_embedding_backward)};

struct EmbeddingBackward final : Node {
  SavedTensor indices{this, "indices"};  // contiguous i64, flattened
  Shape weight_shape;
  DType weight_dtype;
  std::string_view name() const override { return "EmbeddingBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor g = grads[0].contiguous();
    if (compute_requires_grad({&g})) {
      // create_graph: the same row scatter-add as a recorded index_put (fp32 sums for 16-bit there too).
      const Tensor rows = g.reshape({indices.get().numel(), weight_shape[1]});
      return {index_put(zeros(weight_shape, {.dtype = g.dtype(), .device = g.device()}), indices.get(), rows,
                        IndexPutMode::kAccumulate)
                  .to(weight_dtype)};
    }
    return {dispatch(name(), kEmbeddingBackward, g.device(), g, indices.get(), weight_shape, weight_dtype)};
  }
};

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  MT_CHECK(weight.defined() && indices.defined(), "embedding: weight and indices must be defined tensors");
  MT_CHECK(weight.dim() == 2, "embedding: expected a weight of shape [num_embeddings, embedding_dim], got ",
           shape_str(weight.shape()));
  MT_CHECK(is_floating(weight.dtype()), "embedding: expected a floating weight, got ", dtype_name(weight.dtype()));
  kernel_for("embedding", kEmbedding, weight.device());
  const Tensor idx = dispatch("embedding", kEmbeddingIndex, weight.device(), weight, indices);
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.size(1));
  const Tensor w = weight.contiguous();
  Tensor out = empty(out_shape, {.dtype = weight.dtype(), .device = weight.device()});
  dispatch("embedding", kEmbedding, weight.device(), w, idx, out);
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

// Dataset defaults, TensorDataset row gathering, and the epoch / distributed sample orders.
#include "data/dataset.h"

#include <cstring>
#include <numeric>

#include "framework/error.h"
#include "framework/generator.h"

namespace mantissa {
namespace {

// Copies rows `indices` of contiguous `src` [N, ...] into a new [indices.size(), ...] tensor.
Tensor gather_rows(const Tensor& src, std::span<const int64_t> indices) {
  Shape shape = src.shape();
  const int64_t n = shape[0];
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = empty(shape, {.dtype = src.dtype()});
  const size_t row_bytes = n == 0 ? 0 : src.nbytes() / static_cast<size_t>(n);
  const auto* from = static_cast<const unsigned char*>(src.data_ptr());
  auto* to = static_cast<unsigned char*>(out.data_ptr());
  for (size_t i = 0; i < indices.size(); ++i) {
    MT_CHECK(indices[i] >= 0 && indices[i] < n, "TensorDataset: index ", indices[i], " out of range for ", n,
             " examples");
    std::memcpy(to + i * row_bytes, from + static_cast<size_t>(indices[i]) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace

Example Dataset::get_batch(std::span<const int64_t> indices) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return stack_examples(examples);
}

Example stack_examples(const std::vector<Example>& examples) {
  MT_CHECK(!examples.empty(), "stack_examples: no examples. HINT: a batch needs at least one example");
  const Example& first = examples[0];
  Example out;
  for (size_t t = 0; t < first.size(); ++t) {
    Shape shape = first[t].shape();
    shape.insert(shape.begin(), static_cast<int64_t>(examples.size()));
    Tensor batch = empty(shape, {.dtype = first[t].dtype()});
    const size_t bytes = first[t].nbytes();
    for (size_t e = 0; e < examples.size(); ++e) {
      MT_CHECK(examples[e].size() == first.size(), "stack_examples: example ", e, " has ", examples[e].size(),
               " tensors, example 0 has ", first.size());
      const Tensor x = examples[e][t].contiguous();
      MT_CHECK(x.shape() == first[t].shape() && x.dtype() == first[t].dtype(), "stack_examples: tensor ", t,
               " of example ", e, " is ", shape_str(x.shape()), " ", dtype_name(x.dtype()), ", example 0 has ",
               shape_str(first[t].shape()), " ", dtype_name(first[t].dtype()));
      std::memcpy(static_cast<unsigned char*>(batch.data_ptr()) + e * bytes, x.data_ptr(), bytes);
    }
    out.push_back(std::move(batch));
  }
  return out;
}

TensorDataset::TensorDataset(std::vector<Tensor> tensors) {
  MT_CHECK(!tensors.empty(), "TensorDataset: no tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    MT_CHECK(tensors[i].dim() >= 1, "TensorDataset: tensor ", i, " is a scalar. HINT: the first dim indexes examples");
    MT_CHECK(tensors[i].size(0) == tensors[0].size(0), "TensorDataset: tensor ", i, " is ",
             shape_str(tensors[i].shape()), " but tensor 0 is ", shape_str(tensors[0].shape()),
             ". HINT: all tensors need the same first dim");
    tensors_.push_back(tensors[i].detach().contiguous());
  }
  size_ = tensors_[0].size(0);
}

Example TensorDataset::get(int64_t index) const {
  MT_CHECK(index >= 0 && index < size_, "TensorDataset: index ", index, " out of range for ", size_, " examples");
  Example out;
  for (const Tensor& t : tensors_) out.push_back(t.select(0, index));
  return out;
}

Example TensorDataset::get_batch(std::span<const int64_t> indices) const {
  Example out;
  for (const Tensor& t : tensors_) out.push_back(gather_rows(t, indices));
  return out;
}

std::vector<int64_t> epoch_order(int64_t n, Shuffle shuffle, uint64_t seed, int64_t epoch) {
  MT_CHECK(n >= 0 && epoch >= 0, "epoch_order: n ", n, " and epoch ", epoch, " must be >= 0");
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle == Shuffle::kNone) return order;
  Generator gen(seed + static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    // j in [0, i] by modulo: the bias is below n / 2^64, far under anything a run could see.
    const auto j = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

int64_t shard_size(int64_t n, ShardOptions shard) {
  MT_CHECK(shard.world_size >= 1 && shard.rank >= 0 && shard.rank < shard.world_size, "shard_order: rank ", shard.rank,
           " must be in [0, world_size ", shard.world_size, ")");
  MT_CHECK(n >= 0, "shard_order: n ", n, " must be >= 0");
  return shard.drop_last == DropLast::kYes ? n / shard.world_size : (n + shard.world_size - 1) / shard.world_size;
}

std::vector<int64_t> shard_order(const std::vector<int64_t>& order, ShardOptions shard) {
  const auto n = static_cast<int64_t>(order.size());
  const int64_t per_rank = shard_size(n, shard);
  if (shard.world_size == 1) return order;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(per_rank));
  for (int64_t k = 0; k < per_rank; ++k) {
    // Padding (kNo): positions >= n wrap to the start. Truncation (kYes): per_rank * W <= n, no wrap.
    const int64_t pos = shard.rank + k * shard.world_size;
    out.push_back(order[static_cast<size_t>(pos % n)]);
  }
  return out;
}

}  // namespace mantissa

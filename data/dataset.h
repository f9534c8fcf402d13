// Dataset (indexable examples of tensors), TensorDataset, and the sample orders the DataLoader draws from:
// a seeded per-epoch permutation and PyTorch's DistributedSampler sharding.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "framework/tensor.h"

namespace mantissa {

// One example (or one batch): its tensors in a fixed order, e.g. {input, target}.
using Example = std::vector<Tensor>;

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // The example at `index` in [0, size()); each tensor without the batch dim.
  virtual Example get(int64_t index) const = 0;
  // The examples at `indices` stacked along a new first dim. Must be safe to call from the loader's worker
  // thread while the caller's thread runs. The default stacks get(i); subclasses may gather faster.
  virtual Example get_batch(std::span<const int64_t> indices) const;
};

// Rows of tensors that share their first dim (e.g. images [N, 1, 28, 28] and labels [N]).
class TensorDataset final : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  Example get_batch(std::span<const int64_t> indices) const override;
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;  // contiguous
  int64_t size_ = 0;
};

// Stacks same-shape, same-dtype examples along a new first dim (a copy; works without autograd).
Example stack_examples(const std::vector<Example>& examples);

enum class Shuffle { kNone, kRandom };

// Order of [0, n) for an epoch: the identity, or a permutation that depends only on (seed, epoch)
// (Fisher-Yates driven by Generator(seed + epoch), as PyTorch's samplers seed with seed + epoch).
std::vector<int64_t> epoch_order(int64_t n, Shuffle shuffle, uint64_t seed, int64_t epoch);

// Whether the incomplete tail is dropped: the last partial batch (DataLoader), or the samples beyond a multiple
// of world_size (sharding).
enum class DropLast { kNo, kYes };

// PyTorch's DistributedSampler. drop_last kNo: the epoch order padded by repeating its start to a multiple of
// world_size, every rank gets ceil(n / W) indices. kYes: the order truncated to a multiple of world_size, every
// rank gets floor(n / W). Then rank r keeps positions r, r + W, r + 2W, ...
struct ShardOptions {
  int64_t rank = 0;
  int64_t world_size = 1;
  DropLast drop_last = DropLast::kNo;
};
std::vector<int64_t> shard_order(const std::vector<int64_t>& order, ShardOptions shard);
// Indices each rank gets per epoch from n samples: shard_order(...).size().
int64_t shard_size(int64_t n, ShardOptions shard);

}  // namespace mantissa

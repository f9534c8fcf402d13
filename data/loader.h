// DataLoader: batches of a Dataset in a deterministic order given (seed, epoch), optionally sharded across ranks,
// with a resumable position and a worker thread that prepares the next batches while the caller's step runs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/dataset.h"

namespace mantissa {

enum class PinMemory { kNo, kYes };

struct DataLoaderOptions {
  int64_t batch_size = 1;
  Shuffle shuffle = Shuffle::kNone;
  uint64_t seed = 0;
  DropLast drop_last = DropLast::kNo;  // the last partial batch of an epoch
  ShardOptions shard = {};             // rank / world_size / drop_last: PyTorch's DistributedSampler sharding
  int64_t prefetch = 2;  // batches prepared ahead by the worker thread; 0: no thread, batches built in next()
  // kYes: batches are built in pinned (page-locked) host memory (framework/cuda/allocator.h), so that
  // moving them to a GPU with .to(cuda(i)) is written to be an asynchronous copy. Needs a CUDA build and a GPU.
  PinMemory pin_memory = PinMemory::kNo;
};

// Where the loader stands: the next batch next() returns is batch `batch` of epoch `epoch`.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  friend bool operator==(const LoaderPosition&, const LoaderPosition&) = default;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();  // stops and joins the worker
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Samples this rank sees per epoch, and the batches they make.
  int64_t samples_per_epoch() const { return samples_; }
  int64_t batches_per_epoch() const;
  int64_t batch_size() const { return options_.batch_size; }
  const ShardOptions& shard() const { return options_.shard; }

  // The next batch of the current epoch, or nullopt when the epoch is done (the position then moves to
  // {epoch + 1, 0}, so `while (auto b = loader.next())` runs one epoch). Rethrows an error from the worker.
  std::optional<Example> next();

  LoaderPosition position() const { return position_; }
  // Resume: the following next() calls yield exactly the batches from `position` on.
  void set_position(LoaderPosition position);
  void set_epoch(int64_t epoch) { set_position({.epoch = epoch, .batch = 0}); }

  // The indices of batch `batch` in epoch `epoch` for this rank (what next() would gather).
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t batch) const;

 private:
  struct Item {
    LoaderPosition position;
    Example batch;
    std::exception_ptr error;
  };
  Example make_batch(int64_t epoch, int64_t batch) const;
  std::shared_ptr<const std::vector<int64_t>> rank_order(int64_t epoch) const;
  void worker_loop();
  void stop_worker();
  void start_worker();

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  int64_t samples_ = 0;
  LoaderPosition position_;

  // This rank's order of the last epoch asked for (the worker and next() share it).
  mutable std::mutex order_mutex_;
  mutable int64_t order_epoch_ = -1;
  mutable std::shared_ptr<const std::vector<int64_t>> order_;

  // Worker state, guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  LoaderPosition produce_;  // next batch the worker prepares
  bool stop_ = false;
  bool failed_ = false;  // the worker hit an error and waits for a new position
  std::thread worker_;
};

}  // namespace mantissa

// DistributedDataParallel: averages a Module's gradients over the ranks of a ProcessGroup, in buckets whose
// all-reduce starts during backward as soon as all of a bucket's gradients have been accumulated.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/dist/process_group.h"
#include "framework/module.h"

namespace mantissa {

// Whether sync_buffers() copies rank 0's buffers to the other ranks (PyTorch's broadcast_buffers).
enum class BroadcastBuffers { kNo, kYes };

struct DDPOptions {
  // Parameters are packed, in reverse registration order (the order backward produces their gradients),
  // into buckets of at most this many MiB of f32 gradient; a parameter larger than the cap gets a bucket
  // of its own. PyTorch's default is 25 too.
  double bucket_cap_mb = 25;
  // kYes (PyTorch's default too): sync_buffers() makes every rank's buffers rank 0's, so that BatchNorm's
  // running statistics, computed by each rank from its own shard, do not drift apart. kNo: each rank keeps
  // its own (sync_buffers() does nothing).
  BroadcastBuffers broadcast_buffers = BroadcastBuffers::kYes;
};

// Usage, every rank with its own shard of the batch:
//   DistributedDataParallel ddp(model, *pg);   // rank 0's parameters and buffers now on every rank
// The constructor first checks, as PyTorch's does, that every rank has the same parameters (names, shapes,
// dtypes): if not, it throws mantissa::Error on every rank naming the first that differs.
//   ddp.sync_buffers();                        // each step, before its first forward: rank 0's buffers
//   Tensor loss = loss_fn(model.forward(x));
//   loss.backward();                           // buckets are all-reduced while backward runs
//   ddp.finish();                              // every grad is now the mean over the ranks
//   optimizer.step();
// PyTorch's DDP wraps the forward and broadcasts the buffers at its start; here the loop calls the model
// itself, so it calls sync_buffers() where that forward would begin (the Trainer does, once per optimizer
// step, and before each evaluation). Without it the ranks' buffers (BatchNorm's running statistics, each
// updated from the rank's own shard) drift apart, and so do their evaluations. A model without buffers
// needs no call (it does nothing). BatchNorm's batch statistics stay per rank: for statistics over the
// global batch, see convert_sync_batchnorm (models/layers/sync_batch_norm.h).
// Gradient accumulation: backwards inside `auto guard = ddp.no_sync();` only accumulate locally; the next
// backward outside it reduces the accumulated grads (finish() after it as usual).
//
// Every parameter must receive a gradient in every synced backward (PyTorch's find_unused_parameters=False):
// finish() throws mantissa::Error naming the parameters that got none, since zero-filling them would turn
// an undefined grad (which optimizers skip) into a zero one (which weight decay and momentum do not skip).
// Parameters must be f32 (the fp32 masters). The grads are divided by size() before the summing
// all-reduce, so that 16-bit or large sums cannot overflow. Hooks stay on the parameters after the
// DistributedDataParallel is destroyed, but do nothing then.
class DistributedDataParallel {
 public:
  DistributedDataParallel(Module& module, ProcessGroup& group, DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Waits for every bucket's all-reduce and writes the averaged values back into the grads. Call it after
  // each backward outside no_sync(), before the optimizer step. After a backward inside no_sync() it does
  // nothing.
  void finish();

  // Copies rank 0's buffers into every other rank's buffers, all of them in one broadcast (see the usage
  // above for when). Does nothing with BroadcastBuffers::kNo or a module without buffers. A collective:
  // every rank must call it at the same point.
  void sync_buffers();

  // While the returned guard lives, backwards accumulate grads locally and reduce nothing.
  class NoSync {
   public:
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    friend class DistributedDataParallel;
    explicit NoSync(DistributedDataParallel& ddp);
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync();

  // The dotted parameter names of each bucket, bucket 0 first (it holds the last-registered parameters).
  std::vector<std::vector<std::string>> bucket_names() const;

  // What ZeRO-1 (train/zero.h) builds its shards on. Each bucket: its parameters (indices into
  // parameters()), their element offsets in the bucket's flat f32 buffer, and the buffer.
  struct BucketLayout {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;
    Tensor flat;
  };
  std::vector<BucketLayout> bucket_layout() const;
  const std::vector<NamedTensor>& parameters() const;
  // Reduce-scatter instead of all-reduce, with one count per rank for each bucket (bucket_layout()'s order):
  // from now on finish() leaves this rank's region of each bucket's flat buffer holding the mean over the
  // ranks (the rest of the buffer unspecified) and drops every parameter's grad (set to undefined).
  void reduce_scatter_grads(std::vector<std::vector<int64_t>> counts);
  ProcessGroup& group() const;

  struct State;  // shared with the hooks (ddp.cc)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace mantissa

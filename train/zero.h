// ZeRO stage 1 (Rajbhandari et al., DeepSpeed; llm.c has it too): data parallelism in which each rank keeps
// the optimizer state (Adam's moments, SGD's momentum, Lion's) of its shard of the parameters only.
//
//   DistributedDataParallel ddp(model, *pg);
//   ZeroRedundancy zero(ddp, adam);          // adam now updates this rank's shard; its state is 1/N
//   zero.enable_working_copies(DType::kBF16);  // instead of adam.enable_working_copies
//   ...backward (buckets are reduce-scattered while it runs)...
//   zero.finish();                           // this rank's shard of the mean grads, as adam's grads
//   scaler.unscale_(adam);                   // the shard's grads; found_inf is agreed over the ranks
//   zero.clip_grad_norm_(1.0);               // the global norm, the bits DDP's would have
//   scaler.step(adam);                       // updates the shard of the fp32 masters in place
//   zero.gather_parameters();                // every rank's masters and working copies whole again
//
// The shards: the parameters in DDP's bucket order form one flat space, cut into one contiguous range per
// rank as evenly as the cuts allow. A cut falls at a parameter's start or a multiple of
// norm_order::kBlock (16384) elements into it, so that the clipping norm's blocks are never split (see
// clip_sharded_grad_norm_): shards differ by at most that many elements. Each bucket is reduce-scattered
// with the counts its part of each range gives. What is not sharded: the fp32 masters, which in mantissa
// are the model's parameters (every rank's forward reads them in fp32 and they are checkpointed), so after
// each step every rank all-gathers the updated masters (4 bytes per parameter; the working copies are then
// cast on each rank from the same bits); and the gradients during backward (DDP's buckets).
//
// Under the precision ladder (optim/precision_ladder.h) the shards are the same ranges: a cut at a multiple of
// 16384 is one of the 8-bit state's 2048-blocks too, so a shard's codes and absmax are the whole parameter's blocks,
// and a shard rounds stochastically with the whole parameter's random numbers (Optimizer::shard). bf16 weights
// (master_weights=none) are the parameters themselves: their grads are the reduced f32 means rounded to bf16 once,
// as DDP rounds them, clipped in f32 and rounded back as clip_grad_norm_ does, and gathered through the f32 bucket
// buffers (exactly; 4 bytes per parameter where 2 would do). state_dict() gathers codes, bf16 moments and Kahan
// compensation the same way, each absmax at its block's first element.
//
// Equal to DistributedDataParallel bit for bit wherever its reduction sums in the same order: the grads
// are divided by N and summed (a + b = b + a: always on 2 ranks; Open MPI's reduce-scatter and all-reduce
// algorithms may add 3 or more ranks' values in other orders, a last-bit difference), the GradScaler's
// unscale and inf check and the optimizers' updates are elementwise, the clipping norm is the same sum in
// the same order, and the gathered masters are copied bits. tests/dist checks it on 2 and 3 ranks.
//
// CPU parameters over an MPI group (or a world of one); the NCCL group has no reduce_scatter yet.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "optim/clip_grad.h"
#include "optim/optimizer.h"
#include "train/ddp.h"

namespace mantissa {

class ZeroRedundancy {
 public:
  // Shards `optimizer`, whose parameters must be parameters of ddp's module (by name), that holds no state
  // and has no working copies. Throws mantissa::Error when the parameters cannot give every rank a shard.
  // `ddp` and `optimizer` must outlive this object.
  ZeroRedundancy(DistributedDataParallel& ddp, Optimizer& optimizer);

  // Persistent f16/bf16 working copies of the whole parameters (Optimizer::enable_working_copies' role):
  // refreshed by gather_parameters().
  void enable_working_copies(DType dtype);
  void disable_working_copies();
  // Casts the whole masters into the working copies again (after loading weights).
  void refresh_working_copies();

  // After a synced backward (not one inside ddp.no_sync()): ddp.finish(), then the optimizer's parameters
  // (this rank's slices) get their grads, views of the reduced bucket buffers. The model's parameters have
  // no grads after it.
  void finish();
  // clip_grad_norm_ over the whole, reduced grads (a collective): the same total and the same scaled bits
  // as on the unsharded grads. Returns the total as an f64 scalar tensor.
  Tensor clip_grad_norm_(double max_norm, NormType norm_type = NormType::kL2);
  // After the optimizer's step (applied or skipped): every rank's shard of the masters to every rank, then
  // the working copies. A collective. It overwrites the bucket buffers (the shard's grads).
  void gather_parameters();
  // The reduced grads of the whole parameters, all-gathered (a collective), as the module's parameters'
  // grads (views of the bucket buffers) until gather_parameters() drops them; for gradient histograms.
  void gather_grads();

  // The optimizer's whole state, as the unsharded optimizer's state_dict() would hold it: a collective
  // (every rank calls it; every rank gets it).
  OptimizerState state_dict() const;
  // This rank's part of a whole state (as state_dict() returns or an unsharded run saved), for
  // optimizer.load_state_dict(). Checks the whole state's entries against the whole parameters first and
  // throws mantissa::Error naming the first that does not fit.
  OptimizerState shard_state(const OptimizerState& whole) const;

  // This rank's elements, and the whole model's.
  int64_t shard_numel() const;
  int64_t total_numel() const;

 private:
  struct Slice {       // a parameter's elements this rank owns
    size_t param = 0;  // index into ddp.parameters()
    int64_t begin = 0, end = 0;
    size_t bucket = 0;
    int64_t flat_offset = 0;  // of element `begin` in the bucket's flat buffer
  };
  DistributedDataParallel& ddp_;
  Optimizer& optimizer_;
  std::vector<DistributedDataParallel::BucketLayout> buckets_;
  std::vector<std::vector<int64_t>> counts_;   // per bucket, per rank
  std::vector<Slice> slices_;                  // this rank's, in bucket order
  std::map<std::string, size_t> slice_of_;     // by parameter name
  std::map<std::string, size_t> param_index_;  // by name, into ddp.parameters()
  std::map<std::string, Tensor> leaves_;       // the optimizer's parameters (this rank's slices) by name
  // bf16 weights: each leaf's grad, the bucket's f32 mean rounded once, kept from step to step (as DDP's buckets).
  std::map<std::string, Tensor> narrow_grads_;
  // The optimizer's parameters before sharding, group by group: the order of the clipping norm's blocks.
  std::vector<std::vector<std::string>> group_names_;
  // What clip_grad_norm_ hands clip_sharded_grad_norm_, fixed at construction: the whole parameters' sizes in
  // that order, and this rank's slices (the optimizer's leaves, whose grads are read at each call).
  struct NormSlice {
    Tensor leaf;
    size_t param = 0;
    int64_t begin = 0;
  };
  std::vector<int64_t> norm_sizes_;
  std::vector<NormSlice> norm_slices_;
  std::vector<NamedTensor> working_copies_;  // {name, copy}, parallel to ddp.parameters(); empty when off
};

}  // namespace mantissa

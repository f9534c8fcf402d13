// ProcessGroup: the collectives data parallelism needs (all_reduce, broadcast, all_gather, barrier) over
// the ranks of a job, independent of the transport. The MPI backend (CPU tensors, started by mpirun) is in
// mpi_process_group.cc; a world of one process is what init_process_group() gives without MPI.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "framework/tensor.h"

namespace mantissa {

enum class ReduceOp { kSum, kAvg, kMax };
std::string_view reduce_op_name(ReduceOp op);

// kShapes: before every collective the ranks exchange (collective, op, root, dtype, shape) and throw
// mantissa::Error naming both sides when they differ. It costs one small blocking all-gather per call, so
// it is for debugging. With kOff a mismatch is undefined: MPI may report a truncation error, hang until
// the timeout, or reduce garbage.
enum class CollectiveCheck { kOff, kShapes };

struct ProcessGroupOptions {
  // A collective that has not completed after this long throws mantissa::Error (a rank died without the
  // launcher noticing, or the ranks called collectives in different orders). The group is then broken:
  // every later call throws. PyTorch's default is 30 minutes too. MPI counts it in each host wait (wait(),
  // the blocking collectives, barrier()). NCCL counts it for every collective from the moment it can run (its
  // launch or the end of the one before it), checked by a watchdog thread that aborts the communicator even
  // while the host is blocked elsewhere; the error is thrown by the next call on the group or its works.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  CollectiveCheck check = CollectiveCheck::kOff;
};

// A collective in flight. wait() blocks until it completes (or throws on an error or the timeout); after it
// the tensor handed to the collective holds the result. is_completed() never blocks; it also drives MPI's
// progress, so polling it during computation lets the transfer advance. A Work destroyed before wait()
// waits in its destructor (errors are then printed, not thrown), since MPI still owns the buffers.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};

// Collectives work in place on contiguous CPU tensors of f32, f64, f16, bf16 and i64 (broadcast and
// all_gather take every dtype). Every rank must call the same collectives in the same order with tensors
// of the same shape and dtype. 16-bit all_reduce sums in f32 and rounds to 16 bits once at the end (a sum
// of f16 gradients in f16 would lose low bits at every hop and overflow early); kAvg divides the f32 sum by
// size() before that single rounding. kAvg is not defined for i64. Every rank gets the same bits (Open
// MPI's algorithms reduce in one order for all ranks; tests/dist checks it on 2 and 3 ranks), which DDP
// relies on to keep the replicas identical. Collectives must be called from the thread that created the
// group (MPI_THREAD_FUNNELED; autograd runs hooks on the thread that calls backward()).
//
//   auto pg = init_process_group();               // under `mpirun -np 2 prog`: rank 0 and rank 1
//   Tensor g = full({4}, pg->rank() + 1.0);
//   auto work = pg->all_reduce_async(g, ReduceOp::kAvg);
//   ...                                          // other work; work->is_completed() lets MPI progress
//   work->wait();                                 // g is [1.5, 1.5, 1.5, 1.5] on both ranks
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The rank among the processes on this machine (for picking a GPU): 0 in a world of one.
  virtual int local_rank() const = 0;
  virtual std::string_view backend() const = 0;  // "mpi", "local"

  // Starts an all-reduce of `t` in place; the result is there after wait().
  virtual std::unique_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::kSum) = 0;
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::kSum) { all_reduce_async(t, op)->wait(); }
  // Copies rank `root`'s `t` into every other rank's `t`.
  virtual void broadcast(const Tensor& t, int root) = 0;
  // Every rank's `t` stacked along a new dim 0 in rank order: [size(), ...t.shape()], t's dtype.
  virtual Tensor all_gather(const Tensor& t) = 0;
  virtual void barrier() = 0;

  // The sharded collectives of ZeRO-1 (train/zero.h). `counts` has one entry per rank (each >= 0, together
  // t.numel()) and cuts the 1-D contiguous f32 or f64 `t` into the ranks' regions, rank 0's first; every
  // rank passes the same counts.
  // reduce_scatter_async (kSum or kMax): `t` holds this rank's whole input; after wait() this rank's region
  // of `t` holds the reduction of every rank's values there (as all_reduce would, same rules), and the rest
  // of `t` holds unspecified values.
  virtual std::unique_ptr<Work> reduce_scatter_async(const Tensor& t, std::span<const int64_t> counts,
                                                     ReduceOp op = ReduceOp::kSum);
  // Copies this rank's region of `t` into the same region of every other rank's `t`: afterwards every
  // rank's `t` is the ranks' regions side by side.
  virtual void all_gather_regions(const Tensor& t, std::span<const int64_t> counts);
};

// The default group of the job: the MPI world when mantissa is built with MPI (MPI is initialized here if
// the program has not done it, and finalized at exit); a world of one otherwise. A program started without
// mpirun gets a world of one in both cases. Call it once; every call returns a new group over the world.
std::unique_ptr<ProcessGroup> init_process_group(ProcessGroupOptions options = {});

// For a program about to exit with a non-zero status that every rank reached together, past its last
// collective (e.g. a training run stopped on request): finalizes MPI now when init_process_group initialized
// it, so that the exit handler does not take the status for a failure and abort the job. Does nothing
// otherwise. No collective may follow.
void finalize_process_groups();

// A world of one process: collectives leave their tensors as they are (all_gather adds dim 0).
std::unique_ptr<ProcessGroup> make_local_process_group();

namespace dist_detail {
// The argument checks every backend shares; `op` names the collective in the message.
void check_tensor(const Tensor& t, std::string_view op);
void check_reducible(const Tensor& t, ReduceOp reduce, std::string_view op);
// The checks of reduce_scatter_async and all_gather_regions: `t` 1-D, f32 or f64, `counts` one per rank of
// `size`, non-negative, summing to t.numel().
void check_regions(const Tensor& t, std::span<const int64_t> counts, int size, std::string_view op);
}  // namespace dist_detail

}  // namespace mantissa

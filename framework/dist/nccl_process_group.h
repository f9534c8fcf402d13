// The NCCL backend of ProcessGroup: CUDA tensors, one process per GPU. The ranks agree on an NCCL unique
// id through a bootstrap group (the MPI world under mpirun, rank 0 creates the id and broadcasts it), so
// the NCCL group has the bootstrap group's ranks and size. The group exists in CUDA builds (cuda/host/); without
// CUDA make_nccl_process_group refuses (cuda/absent/).
#pragma once

#include <memory>

#include "framework/dist/process_group.h"

namespace mantissa {

// Collectives run on the group's own CUDA stream, ordered after the work already queued on the calling
// thread's current stream of `device` (so an all-reduce launched from a backward hook overlaps the rest of
// the backward pass). The CUDA meaning of Work applies: wait() does not block the host; it orders the
// current stream after the collective, so every kernel launched afterwards sees the result (PyTorch's
// semantics). is_completed() asks the GPU without blocking. barrier() blocks the host until every rank has
// reached it and all collectives before it are done.
//
// options.timeout covers every collective, whether or not the host ever waits for it: a watchdog thread
// polls each one's completion event and ncclCommGetAsyncError, and when a collective has run longer than
// the timeout (counted from its launch, or from the completion of the collective before it, as they run
// in order) or NCCL reports an error, it aborts the communicator. Kernels stuck on a dead peer then return,
// so a host read blocked behind them (loss.item(), a copy to the CPU) comes back, with values not to be
// trusted. From then on every call on the group, and wait()/is_completed() of a collective that had not
// completed, throws mantissa::Error at once with the reason: the collective and its sequence number (the
// same on every rank), the tensor's dtype, shape and bytes, the rank, the elapsed time and NCCL's error.
// The reason is also printed to stderr when the abort happens. See framework/dist/README.md.
// Tensors must be contiguous and on `device`; f32, f64, f16, bf16 and i64. 16-bit all-reduces sum in f32
// (a staging copy) and round once, the contract of the MPI backend.
//
//   auto world = init_process_group();                       // MPI, under mpirun
//   auto nccl = make_nccl_process_group(*world, cuda(world->local_rank()));
//   nccl->all_reduce(grads_on_gpu, ReduceOp::kAvg);
//
// Throws mantissa::Error when mantissa is built without CUDA, when `device` is not a usable GPU, or when
// NCCL fails to initialize (the message carries NCCL's reason).
std::unique_ptr<ProcessGroup> make_nccl_process_group(ProcessGroup& bootstrap, Device device,
                                                      ProcessGroupOptions options = {});

// One group for a GPU job whose collectives see both kinds of tensors (PyTorch's "cpu:gloo,cuda:nccl"): CUDA
// tensors go to `cuda_group` (NCCL), CPU tensors to `cpu_group` (MPI: the loss averaged for the log, the
// evaluation sums). Both must span the same ranks; barrier() passes both. Owns both groups.
std::unique_ptr<ProcessGroup> make_device_dispatch_group(std::unique_ptr<ProcessGroup> cpu_group,
                                                         std::unique_ptr<ProcessGroup> cuda_group);

}  // namespace mantissa

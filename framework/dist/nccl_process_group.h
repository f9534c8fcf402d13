// The NCCL backend of ProcessGroup: CUDA tensors, one process per GPU. The ranks agree on an NCCL unique
// id through a bootstrap group (the MPI world under mpirun, rank 0 creates the id and broadcasts it), so
// the NCCL group has the bootstrap group's ranks and size. Built only with MANTISSA_CUDA.
#pragma once

#include <memory>

#include "framework/dist/process_group.h"

namespace mantissa {

// Collectives run on the group's own CUDA stream, ordered after the work already queued on the calling
// thread's current stream of `device` (so an all-reduce launched from a backward hook overlaps the rest of
// the backward pass). The CUDA meaning of Work applies: wait() does not block the host; it orders the
// current stream after the collective, so every kernel launched afterwards sees the result (PyTorch's
// semantics). is_completed() asks the GPU without blocking. barrier() blocks the host until every rank has
// reached it and all collectives before it are done; it, like all waits the host makes, honours
// options.timeout: past it the communicator is aborted and mantissa::Error names the collective.
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

}  // namespace mantissa

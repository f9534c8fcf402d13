// The MPI backend of ProcessGroup: CPU tensors over OpenMPI (or any MPI-3 library), one process per rank,
// started by mpirun. Built only with MANTISSA_MPI; mpi.h stays private to mpi_process_group.cc.
#pragma once

#include "framework/dist/process_group.h"

#if MANTISSA_WITH_MPI
namespace mantissa {

// A group over all the processes of the job (a duplicate of MPI_COMM_WORLD, so the program's own MPI
// calls never match ours). Initializes MPI with MPI_THREAD_FUNNELED when the program has not; then, at
// exit, a process exiting with status 0 calls MPI_Finalize and one exiting with another status calls
// MPI_Abort, so that a failing rank ends the whole job at once instead of leaving the others blocked in a
// collective (MPI_Finalize would wait for them). local_rank() reads OMPI_COMM_WORLD_LOCAL_RANK (set by
// Open MPI's mpirun) and otherwise counts the ranks sharing this machine's memory.
std::unique_ptr<ProcessGroup> make_mpi_process_group(ProcessGroupOptions options = {});

// MPI_Finalize now, when make_mpi_process_group initialized MPI and it is not finalized yet
// (finalize_process_groups in process_group.h says when).
void finalize_mpi_if_ours();

}  // namespace mantissa
#endif

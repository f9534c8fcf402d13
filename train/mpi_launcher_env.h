// How a training program finds its ranks: the launcher's environment (mpirun, mpiexec) says whether this
// process is one of several, and the process group is made accordingly.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "framework/dist/process_group.h"

namespace mantissa {

// What the launcher told this process; {0, 1, 1} when started without one.
struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_size = 1;  // ranks on this machine
};
// Reads Open MPI's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_SIZE}, else MPICH's (Hydra) PMI_RANK / PMI_SIZE, else
// MVAPICH's MV2_COMM_WORLD_{RANK,SIZE}.
LaunchInfo launch_info();

// The job's process group: the MPI world under a launcher (world size > 1), a world of one otherwise (MPI
// is then not initialized at all). An error when a launcher started several processes but mantissa was
// built without MPI (each would train alone and they would overwrite each other's files).
absl::StatusOr<std::unique_ptr<ProcessGroup>> process_group_from_launcher(ProcessGroupOptions options = {});

}  // namespace mantissa

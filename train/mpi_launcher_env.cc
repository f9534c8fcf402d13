// launch_info() and process_group_from_launcher() (train/mpi_launcher_env.h).
#include "train/mpi_launcher_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mantissa {
namespace {

// The first of `names` that is set and parses as an integer.
bool env_int(std::initializer_list<const char*> names, int* value) {
  for (const char* name : names) {
    const char* text = std::getenv(name);
    if (text != nullptr && absl::SimpleAtoi(text, value)) return true;
  }
  return false;
}

}  // namespace

LaunchInfo launch_info() {
  LaunchInfo info;
  if (!env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"}, &info.world_size)) return {};
  env_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK"}, &info.rank);
  if (!env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE"}, &info.local_size)) {
    info.local_size = info.world_size;  // unknown: assume one machine, the conservative guess for threads
  }
  return info;
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> process_group_from_launcher(ProcessGroupOptions options) {
  const LaunchInfo info = launch_info();
  if (info.world_size <= 1) return make_local_process_group();
  std::unique_ptr<ProcessGroup> group = init_process_group(options);
  if (group->size() != info.world_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "started by mpirun as one of ", info.world_size, " processes, but the process group has ", group->size(), " (",
        std::string(group->backend()), "): was mantissa built without MPI? (cmake -DMANTISSA_MPI=ON)"));
  }
  return group;
}

}  // namespace mantissa

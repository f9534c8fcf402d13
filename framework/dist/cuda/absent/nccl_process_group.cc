// What make_nccl_process_group answers in a build without CUDA (CMake compiles cuda/absent/ only then): a
// refusal that names the device and says why. The NCCL group is framework/dist/cuda/host/nccl_process_group.cc.
#include "framework/dist/nccl_process_group.h"

#include "framework/cuda/device.h"
#include "framework/error.h"

namespace mantissa {

std::unique_ptr<ProcessGroup> make_nccl_process_group(ProcessGroup& bootstrap, Device device,
                                                      ProcessGroupOptions options) {
  (void)bootstrap;
  (void)options;
  MT_THROW("make_nccl_process_group: cannot use ", device.str(), ": ", cuda_unavailable_reason(),
           ". HINT: NCCL needs mantissa built with CUDA; CPU tensors use the MPI group (init_process_group)");
}

}  // namespace mantissa

// The shared error path of framework/device_kernels.h.
#include "framework/device_kernels.h"

#include "framework/error.h"

namespace mantissa {

void no_kernel(std::string_view op, const Device& device) {
  const bool build_lacks_cuda = device.is_cuda() && !kCudaCompiledIn;
  throw Error(detail::cat(op, ": no kernel for ", device.str(), " in this build",
                          build_lacks_cuda ? ". HINT: configure with -DMANTISSA_CUDA=ON on a machine with nvcc" : ""));
}

}  // namespace mantissa

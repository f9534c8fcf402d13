// The shared error path of framework/device_kernels.h.
#include "framework/device_kernels.h"

#include "framework/error.h"

namespace mantissa {

void no_kernel(std::string_view op, const Device& device) {
  throw Error(detail::cat(op, ": no kernel for ", device.str(), " in this build"));
}

}  // namespace mantissa

// MT_CUDA_CHECK(expr): runs a CUDA runtime call and throws mantissa::Error naming the expression,
// file:line and CUDA's error string when it fails. MT_CUDA_LAUNCH_CHECK(kernel): the check after a kernel
// launch, naming the kernel. A CUDA header: only for files that CMake compiles with CUDA alone (.cu,
// */cuda/host/*.cc).
#pragma once

#include <cuda_runtime_api.h>

#include "framework/error.h"

#define MT_CUDA_CHECK(expr)                                                                                         \
  do {                                                                                                              \
    const cudaError_t mt_cuda_err_ = (expr);                                                                        \
    if (mt_cuda_err_ != cudaSuccess) [[unlikely]] {                                                                 \
      MT_THROW("CUDA error: ", #expr, " failed at ", __FILE__, ":", __LINE__, ": ", cudaGetErrorName(mt_cuda_err_), \
               ": ", cudaGetErrorString(mt_cuda_err_));                                                             \
    }                                                                                                               \
  } while (0)

// After `kernel<<<...>>>(...)`: cudaGetLastError reports a bad launch (grid or block too large, too much
// shared memory, no image for this GPU) at once; it also returns a sticky error that an earlier kernel
// left on the device, which the message says, since the kernel named may then be innocent.
#define MT_CUDA_LAUNCH_CHECK(kernel)                                                                       \
  do {                                                                                                     \
    const cudaError_t mt_cuda_err_ = cudaGetLastError();                                                   \
    if (mt_cuda_err_ != cudaSuccess) [[unlikely]] {                                                        \
      MT_THROW("CUDA error: launching ", kernel, " failed at ", __FILE__, ":", __LINE__, ": ",             \
               cudaGetErrorName(mt_cuda_err_), ": ", cudaGetErrorString(mt_cuda_err_),                     \
               " (an error left by an earlier asynchronous kernel is reported here too; HINT: rerun with " \
               "CUDA_LAUNCH_BLOCKING=1 or under compute-sanitizer to find the kernel that failed)");       \
    }                                                                                                      \
  } while (0)

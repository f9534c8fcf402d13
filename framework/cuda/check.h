// MT_CUDA_CHECK(expr): runs a CUDA runtime call and throws mantissa::Error naming the expression,
// file:line and CUDA's error string when it fails. Only for files built with MANTISSA_WITH_CUDA.
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

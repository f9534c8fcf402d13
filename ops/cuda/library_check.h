// MT_CUBLAS_CHECK / MT_CUDNN_CHECK: run a cuBLAS(Lt) or cuDNN call and throw mantissa::Error naming the
// expression, file:line and the library's status name, as MT_CUDA_CHECK does for the runtime. Only for
// CUDA-only files (.cu, host/*.cc).
#pragma once

#include <cublas_api.h>
#include <cudnn.h>

#include "framework/error.h"

#define MT_CUBLAS_CHECK(expr)                                                                           \
  do {                                                                                                  \
    const cublasStatus_t mt_cublas_status_ = (expr);                                                    \
    if (mt_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                      \
      MT_THROW("cuBLAS error: ", #expr, " failed at ", __FILE__, ":", __LINE__, ": ",                   \
               cublasGetStatusName(mt_cublas_status_), ": ", cublasGetStatusString(mt_cublas_status_)); \
    }                                                                                                   \
  } while (0)

#define MT_CUDNN_CHECK(expr)                                                                                 \
  do {                                                                                                       \
    const cudnnStatus_t mt_cudnn_status_ = (expr);                                                           \
    if (mt_cudnn_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]] {                                             \
      MT_THROW("cuDNN error: ", #expr, " failed at ", __FILE__, ":", __LINE__, ": ",                         \
               cudnnGetErrorString(mt_cudnn_status_), " (status ", static_cast<int>(mt_cudnn_status_), ")"); \
    }                                                                                                        \
  } while (0)

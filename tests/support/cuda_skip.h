// MT_SKIP_WITHOUT_CUDA(): the one way a test that needs a GPU skips where none is usable (a build without
// CUDA, no driver, no device), with the reason: "no CUDA device: <cuda_unavailable_reason()>". In a TEST
// body or a fixture's SetUp().
#pragma once

#include <gtest/gtest.h>

#include "framework/cuda/device.h"

#define MT_SKIP_WITHOUT_CUDA()                                                     \
  do {                                                                             \
    if (::mantissa::cuda_device_count() == 0) {                                    \
      GTEST_SKIP() << "no CUDA device: " << ::mantissa::cuda_unavailable_reason(); \
    }                                                                              \
  } while (0)

// The CUDA GEMM of ops/matmul/matmul.cc: cuBLASLt (ops/matmul/gemm_launch.h) on the device's current stream, with a row
// bias added by its epilogue. Declared in every build; defined in matmul.cu, which only CUDA builds
// compile (T: float, double, Half, BFloat16).
#pragma once

#include "framework/device.h"
#include "ops/matmul/gemm_cpu.h"

namespace mantissa {

// C_i = alpha * op(A_i) op(B_i) + beta * C_i (+ row_bias [n], when not null, with beta 0).
template <typename T>
void cuda_gemm(const cpu::BatchedGemmArgs<T>& args, const T* row_bias, Device device);

}  // namespace mantissa

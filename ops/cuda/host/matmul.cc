// The CUDA side of ops/matmul.cc.
#include "ops/cuda/host/matmul.h"

#include "framework/cuda/stream.h"
#include "ops/cuda/gemm.h"

namespace mantissa {

template <typename T>
void cuda_gemm(const cpu::BatchedGemmArgs<T>& args, const T* row_bias, Device device) {
  gpu::gemm(gpu::GemmArgs<T>{.gemm = args, .bias = row_bias}, device.index, gpu::current_stream(device.index));
}

template void cuda_gemm<float>(const cpu::BatchedGemmArgs<float>&, const float*, Device);
template void cuda_gemm<double>(const cpu::BatchedGemmArgs<double>&, const double*, Device);
template void cuda_gemm<Half>(const cpu::BatchedGemmArgs<Half>&, const Half*, Device);
template void cuda_gemm<BFloat16>(const cpu::BatchedGemmArgs<BFloat16>&, const BFloat16*, Device);

}  // namespace mantissa

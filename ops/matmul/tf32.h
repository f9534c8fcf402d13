// The process-wide TF32 switches for f32 GEMM and convolution on CUDA, like PyTorch's
// torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32, except that both default
// to off here: an f32 GEMM or conv is exact f32 unless a program asks for TF32. Declared in every build
// (without CUDA they only hold the value).
#pragma once

#include <cstdint>

namespace mantissa {

// kOn lets f32 GEMMs (resp. convolutions) on CUDA round their operands to TF32 (10-bit mantissa) on tensor
// cores, accumulating in f32: several times faster, about 1e-3 relative error. f16/bf16/f64 are unaffected.
enum class Tf32 : uint8_t { kOff, kOn };

void set_cuda_matmul_tf32(Tf32 mode);
Tf32 cuda_matmul_tf32();
void set_cuda_conv_tf32(Tf32 mode);
Tf32 cuda_conv_tf32();

}  // namespace mantissa

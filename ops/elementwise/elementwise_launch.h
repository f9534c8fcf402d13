// Launchers of the CUDA elementwise kernels (ops/elementwise/elementwise.cu): raw device pointers, a layout
// planned on the host (ops/elementwise/elementwise_plan.h) and the stream. T is float, double, Half or
// BFloat16; 16-bit values compute in f32 and round once (round-to-nearest-even) at the store.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "framework/half.h"
#include "ops/cuda/offset_calc.h"
#include "ops/pointwise_math.h"

namespace mantissa::gpu {

// out[i] = op(x) over a contiguous out of layout.numel elements.
template <typename T>
void launch_unary(PointwiseOp<UnaryOp> op, const ElementwiseLayout<1>& layout, const T* x, T* out, cudaStream_t stream);
template <typename T>
void launch_binary(PointwiseOp<BinaryOp> op, const ElementwiseLayout<2>& layout, const T* a, const T* b, T* out,
                   cudaStream_t stream);
template <typename T>
void launch_ternary(PointwiseOp<TernaryOp> op, const ElementwiseLayout<3>& layout, const T* a, const T* b, const T* c,
                    T* out, cudaStream_t stream);
// T also int64_t, int32_t and bool; 16-bit values compare in f32 as on the CPU.
template <typename T>
void launch_compare(CompareOp op, const ElementwiseLayout<2>& layout, const T* a, const T* b, bool* out,
                    cudaStream_t stream);
// out[i] = cond ? a : b with the layout's inputs in the order (cond, a, b); elements of elem_size
// bytes (1, 2, 4 or 8) are moved as bits, so any dtype works.
void launch_select(int elem_size, const ElementwiseLayout<3>& layout, const bool* cond, const void* a, const void* b,
                   void* out, cudaStream_t stream);

}  // namespace mantissa::gpu

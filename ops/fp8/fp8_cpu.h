// The CPU kernels of the FP8 ops (ops/fp8/fp8.cc) over raw pointers: the one-pass quantize (cast, amax and
// overflow count), amax alone, the exact FP8 -> bf16 decode the scaled matmul's emulation starts with,
// and its epilogue. The per-element math is ops/fp8/fp8_math.h's, shared with the CUDA kernels.
#pragma once

#include <cstdint>

#include "framework/convert.h"
#include "framework/dtype.h"
#include "framework/float8.h"
#include "framework/half.h"

namespace mantissa::cpu {

// What a quantize pass saw: max |x| as float bits (nan above inf, ops/fp8/fp8_math.h) and the elements that
// overflowed the format.
struct Fp8PassStats {
  uint32_t amax_bits = 0;
  int64_t overflow = 0;
  int64_t underflow = 0;  // finite non-zero elements whose byte is a zero
};

// out[i] = cast(x[i] * scale) for n contiguous elements, x * scale in f32 and the cast to `fp8` (kF8E4M3 or
// kF8E5M2) with `overflow`'s rule; In is float, Half or BFloat16. One sweep over each block of values (widen,
// amax, scale, overflow count and cast together), the blocks split over the threads; the statistics do not
// depend on the thread count (a maximum and a count). `isa` picks the vector width (kAvx2 or kAvx512, which
// this CPU must support; kScalar runs kAvx2's code): the default is convert()'s choice, the others are for
// tests that compare them. Every choice gives the same bits.
template <typename In>
Fp8PassStats quantize_fp8(const In* x, int64_t n, float scale, DType fp8, Fp8Overflow overflow, uint8_t* out,
                          ConvertIsa isa = convert_isa());

// max |x| over n contiguous elements, as float bits (0 for n == 0).
template <typename In>
uint32_t amax_bits(const In* x, int64_t n);

// The rows x cols matrix of FP8 bytes at src (element (i, j) at src[i * row_stride + j * col_stride]) decoded
// exactly to bf16 (which holds every FP8 value: at most 3 fraction bits against bf16's 7, nan payloads
// included) into the dense row-major dst [rows, cols].
void decode_fp8(const uint8_t* src, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, DType fp8,
                BFloat16* dst);

// The scaled matmul's epilogue over the dense f32 accumulator acc [m, n]: out[i, j] =
// fp8::epilogue(acc[i, j], scale, bias[j]) (no bias when bias is null), rounded once to Out (float, Half or
// BFloat16); out is dense [m, n] and may be acc itself when Out is float.
// rowwise scales: row [m] and col [n] (each may be null: 1), out[i, j] = epilogue(acc, row[i] * col[j], bias),
// which replaces `scale`.
struct RowColScales {
  const float* row = nullptr;
  const float* col = nullptr;
};
template <typename Out>
void scaled_mm_epilogue(const float* acc, int64_t m, int64_t n, float scale, const float* bias, Out* out,
                        RowColScales rowcol = {});

}  // namespace mantissa::cpu

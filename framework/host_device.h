// MT_HD marks a function both nvcc (__host__ __device__) and the host compiler build, so CPU tests run the very
// per-element code CUDA kernels run (rounded per framework/rounding.h). Headers using it include no CUDA header.
#pragma once

#ifndef MT_HD
#if defined(__CUDACC__)
#define MT_HD __host__ __device__
#else
#define MT_HD
#endif
#endif

// MT_HD marks a function both nvcc (as __host__ __device__) and the host compiler build, so the CPU tests
// run the very per-element code the CUDA kernels run. Headers using it include no CUDA header.
#pragma once

#ifndef MT_HD
#if defined(__CUDACC__)
#define MT_HD __host__ __device__
#else
#define MT_HD
#endif
#endif

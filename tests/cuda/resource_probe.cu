// A kernel whose resource numbers are known, built for tests/cuda/resource_budget.py's --probe: 96 threads
// at most (__launch_bounds__), 1200 bytes of static shared memory, and a 64-float array indexed at run time,
// which ptxas must place in local memory (a stack frame of at least 256 bytes). If the script reads these
// back wrong, it has misread the toolkit's format, and the budget check fails instead of passing blindly.
// Not part of any library; compiled without -Werror's ptxas warnings (its local memory is on purpose).
__global__ void __launch_bounds__(96) resource_probe(const float* in, float* out, int pick) {
  __shared__ float tile[300];
  float local[64];
  for (int i = 0; i < 64; ++i) local[i] = in[i * 96 + threadIdx.x];
  for (int i = threadIdx.x; i < 300; i += blockDim.x) tile[i] = in[i];
  __syncthreads();
  out[threadIdx.x] = local[(pick + threadIdx.x) & 63] + tile[(pick * 7 + threadIdx.x) % 300];
}

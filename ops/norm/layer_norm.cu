// CUDA layer_norm: forward and input gradient with a warp per row (rows up to 1024 wide) or a block per
// row, two-pass statistics in f32 (f64 for f64) as the CPU; the weight and bias gradients as column sums
// over row slices (32 columns x 8 row lanes per block), added in slice order by a final pass.
#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/device_types.cuh"
#include "ops/cuda/offset_calc.h"
#include "ops/norm/layer_norm_launch.h"

namespace mantissa::gpu {
namespace {

constexpr int kThreads = 256;

// The rows a thread group works on (row_math.h's grid-stride RowLoop; TPR threads per row).
template <int TPR>
__device__ __forceinline__ RowLoop group_rows() {
  return row_loop(blockIdx.x, gridDim.x, threadIdx.x / TPR, kThreads / TPR);
}

template <int TPR, typename D, typename P>
__global__ void layer_norm_forward_kernel(int64_t rows, int64_t cols, P eps, const D* __restrict__ x,
                                          const P* __restrict__ w, const P* __restrict__ b, D* __restrict__ y,
                                          P* __restrict__ mean, P* __restrict__ rstd) {
  const RowLoop loop = group_rows<TPR>();
  const int lane = threadIdx.x % TPR;
  for (int64_t row = loop.first; row < rows; row += loop.step) {  // whole groups leave together
    const D* xr = x + row * cols;
    P s = 0;
    for (int64_t j = lane; j < cols; j += TPR) s += static_cast<P>(load(xr[j]));
    const P mu = row_sum<TPR>(s) / static_cast<P>(cols);
    P ss = 0;
    for (int64_t j = lane; j < cols; j += TPR) {
      const P d = static_cast<P>(load(xr[j])) - mu;
      ss += mul_rn(d, d);
    }
    const P rs = P(1) / hd_sqrt(row_sum<TPR>(ss) / static_cast<P>(cols) + eps);
    D* yr = y + row * cols;
    for (int64_t j = lane; j < cols; j += TPR) {
      P v = mul_rn(static_cast<P>(load(xr[j])) - mu, rs);
      if (w) v = mul_rn(v, w[j]);
      if (b) v += b[j];
      yr[j] = store<D>(v);
    }
    if (lane == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
  }
}

template <int TPR, typename D, typename P>
__global__ void layer_norm_backward_input_kernel(int64_t rows, int64_t cols, const D* __restrict__ dy,
                                                 const D* __restrict__ x, const P* __restrict__ mean,
                                                 const P* __restrict__ rstd, const P* __restrict__ w,
                                                 D* __restrict__ dx) {
  const RowLoop loop = group_rows<TPR>();
  const int lane = threadIdx.x % TPR;
  for (int64_t row = loop.first; row < rows; row += loop.step) {
    const D* xr = x + row * cols;
    const D* gr = dy + row * cols;
    const P mu = mean[row], rs = rstd[row];
    P sg = 0, sgx = 0;
    for (int64_t j = lane; j < cols; j += TPR) {
      const P gw = w ? mul_rn(static_cast<P>(load(gr[j])), w[j]) : static_cast<P>(load(gr[j]));
      sg += gw;
      sgx += mul_rn(mul_rn(gw, static_cast<P>(load(xr[j])) - mu), rs);
    }
    const P mg = row_sum<TPR>(sg) / static_cast<P>(cols);
    const P mgx = row_sum<TPR>(sgx) / static_cast<P>(cols);
    D* dr = dx + row * cols;
    for (int64_t j = lane; j < cols; j += TPR) {
      const P gw = w ? mul_rn(static_cast<P>(load(gr[j])), w[j]) : static_cast<P>(load(gr[j]));
      const P xhat_term = mul_rn(mul_rn(static_cast<P>(load(xr[j])) - mu, rs), mgx);
      dr[j] = store<D>(rs * (gw - mg - xhat_term));
    }
  }
}

// Block (32, 8): columns c0 + threadIdx.x, rows of slice blockIdx.y stepped by the 8 row lanes.
template <typename D, typename P>
__global__ void layer_norm_params_kernel(int64_t rows, int64_t cols, int64_t chunk, const D* __restrict__ dy,
                                         const D* __restrict__ x, const P* __restrict__ mean,
                                         const P* __restrict__ rstd, P* __restrict__ out_w, P* __restrict__ out_b,
                                         int64_t out_stride) {
  __shared__ P sw[8][33], sb[8][33];
  const int64_t c = int64_t{blockIdx.x} * 32 + threadIdx.x;
  const int64_t r0 = int64_t{blockIdx.y} * chunk, r1 = min(rows, r0 + chunk);
  P aw = 0, ab = 0;
  if (c < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const P g = static_cast<P>(load(dy[r * cols + c]));
      aw += mul_rn(mul_rn(g, static_cast<P>(load(x[r * cols + c])) - mean[r]), rstd[r]);
      ab += g;
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int k = 1; k < 8; ++k) {
      aw += sw[k][threadIdx.x];
      ab += sb[k][threadIdx.x];
    }
    const int64_t at = int64_t{blockIdx.y} * out_stride + c;
    if (out_w) out_w[at] = aw;
    if (out_b) out_b[at] = ab;
  }
}

template <typename P>
__global__ void column_slices_sum_kernel(int64_t cols, int64_t slices, const P* __restrict__ ws_w,
                                         const P* __restrict__ ws_b, P* __restrict__ dw, P* __restrict__ db) {
  for (int64_t c = global_thread(); c < cols; c += grid_threads()) {
    P aw = 0, ab = 0;
    for (int64_t s = 0; s < slices; ++s) {
      aw += ws_w[s * cols + c];
      ab += ws_b[s * cols + c];
    }
    if (dw) dw[c] = aw;
    if (db) db[c] = ab;
  }
}

unsigned row_blocks(int64_t rows, int tpr) { return row_launch_blocks(rows, kThreads / tpr); }

}  // namespace

template <typename T>
void launch_layer_norm_forward(int64_t rows, int64_t cols, double eps, const T* x, const param_t<T>* w,
                               const param_t<T>* b, T* y, param_t<T>* mean, param_t<T>* rstd, cudaStream_t stream) {
  if (rows == 0) return;
  using P = param_t<T>;
  const P e = static_cast<P>(eps);
  if (softmax_threads_per_row(cols) == 32) {
    layer_norm_forward_kernel<32>
        <<<row_blocks(rows, 32), kThreads, 0, stream>>>(rows, cols, e, dev(x), w, b, dev(y), mean, rstd);
  } else {
    layer_norm_forward_kernel<kThreads>
        <<<row_blocks(rows, kThreads), kThreads, 0, stream>>>(rows, cols, e, dev(x), w, b, dev(y), mean, rstd);
  }
  MT_CUDA_LAUNCH_CHECK("layer_norm_forward_kernel");
}

template <typename T>
void launch_layer_norm_backward_input(int64_t rows, int64_t cols, const T* dy, const T* x, const param_t<T>* mean,
                                      const param_t<T>* rstd, const param_t<T>* w, T* dx, cudaStream_t stream) {
  if (rows == 0) return;
  if (softmax_threads_per_row(cols) == 32) {
    layer_norm_backward_input_kernel<32>
        <<<row_blocks(rows, 32), kThreads, 0, stream>>>(rows, cols, dev(dy), dev(x), mean, rstd, w, dev(dx));
  } else {
    layer_norm_backward_input_kernel<kThreads>
        <<<row_blocks(rows, kThreads), kThreads, 0, stream>>>(rows, cols, dev(dy), dev(x), mean, rstd, w, dev(dx));
  }
  MT_CUDA_LAUNCH_CHECK("layer_norm_backward_input_kernel");
}

int64_t layer_norm_param_slices(int64_t rows, int64_t cols, int device) {
  return column_slices(rows, cols, multiprocessor_count(device));
}

template <typename T>
void launch_layer_norm_backward_params(int64_t rows, int64_t cols, int64_t slices, const T* dy, const T* x,
                                       const param_t<T>* mean, const param_t<T>* rstd, param_t<T>* workspace,
                                       param_t<T>* dw, param_t<T>* db, cudaStream_t stream) {
  using P = param_t<T>;
  if (cols == 0 || (!dw && !db)) return;
  const int64_t chunk = rows == 0 ? 1 : ceil_div(rows, slices);
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, 32)), static_cast<unsigned>(slices));
  if (slices == 1) {
    layer_norm_params_kernel<<<grid, dim3(32, 8), 0, stream>>>(rows, cols, chunk, dev(dy), dev(x), mean, rstd, dw, db,
                                                               cols);
    MT_CUDA_LAUNCH_CHECK("layer_norm_params_kernel");
  } else {
    P* ws_w = workspace;
    P* ws_b = workspace + slices * cols;
    layer_norm_params_kernel<<<grid, dim3(32, 8), 0, stream>>>(rows, cols, chunk, dev(dy), dev(x), mean, rstd, ws_w,
                                                               ws_b, cols);
    MT_CUDA_LAUNCH_CHECK("layer_norm_params_kernel");
    const LaunchGeometry g = elementwise_geometry(cols);
    column_slices_sum_kernel<<<g.blocks, g.threads, 0, stream>>>(cols, slices, ws_w, ws_b, dw, db);
    MT_CUDA_LAUNCH_CHECK("column_slices_sum_kernel");
  }
}

#define MT_INSTANTIATE(T)                                                                                              \
  template void launch_layer_norm_forward<T>(int64_t, int64_t, double, const T*, const param_t<T>*, const param_t<T>*, \
                                             T*, param_t<T>*, param_t<T>*, cudaStream_t);                              \
  template void launch_layer_norm_backward_input<T>(int64_t, int64_t, const T*, const T*, const param_t<T>*,           \
                                                    const param_t<T>*, const param_t<T>*, T*, cudaStream_t);           \
  template void launch_layer_norm_backward_params<T>(int64_t, int64_t, int64_t, const T*, const T*, const param_t<T>*, \
                                                     const param_t<T>*, param_t<T>*, param_t<T>*, param_t<T>*,         \
                                                     cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
MT_INSTANTIATE(Half)
MT_INSTANTIATE(BFloat16)
#undef MT_INSTANTIATE

}  // namespace mantissa::gpu

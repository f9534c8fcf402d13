// Host-side parts of the CUDA batch_norm and pooling kernels (ops/cuda/cnn_math.h), run on the CPU and
// compared with the CPU kernels: the pool windows and the outputs covering each input, max/avg pooling
// forward and backward built from them (bit for bit, as the GPU kernels build them), and the batch_norm
// per-element formulas and f64 statistics (bit for bit, given the same sums).
#include "ops/cuda/cnn_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/norm/norm.h"
#include "ops/norm/norm_cpu.h"
#include "ops/pool/pool_cpu.h"
#include "tests/cuda/cuda_compare.h"

namespace mantissa {
namespace {

using cpu::Pool2dGeometry;

Pool2dGeometry make_geometry(int64_t planes, int64_t h, int64_t w, int64_t k, int64_t s, int64_t p) {
  Pool2dGeometry g{.planes = planes, .h = h, .w = w};
  g.kh = k, g.kw = k, g.stride_h = s, g.stride_w = s, g.pad_h = p, g.pad_w = p;
  g.oh = (h + 2 * p - k) / s + 1;
  g.ow = (w + 2 * p - k) / s + 1;
  return g;
}

// The 2x2 fast path (even and odd sizes, as the CNN's 26 and 11), overlapping, padded and strided windows.
std::vector<Pool2dGeometry> geometries() {
  return {make_geometry(3, 26, 26, 2, 2, 0), make_geometry(2, 11, 11, 2, 2, 0), make_geometry(2, 9, 7, 3, 1, 1),
          make_geometry(2, 10, 13, 3, 2, 1), make_geometry(1, 8, 8, 4, 3, 2),   make_geometry(1, 5, 6, 1, 1, 0)};
}

TEST(CudaCnnMath, PoolCoveringMatchesBruteForce) {
  for (const Pool2dGeometry& g : geometries()) {
    for (int64_t iy = 0; iy < g.h; ++iy) {
      for (int64_t ix = 0; ix < g.w; ++ix) {
        const gpu::PoolSpan cov = gpu::pool_covering(g, iy, ix);
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const gpu::PoolSpan win = gpu::pool_window(g, oy, ox);
            const bool inside = iy >= win.y0 && iy < win.y1 && ix >= win.x0 && ix < win.x1;
            const bool covered = oy >= cov.y0 && oy < cov.y1 && ox >= cov.x0 && ox < cov.x1;
            EXPECT_EQ(inside, covered) << "input " << iy << "," << ix << " output " << oy << "," << ox << " k" << g.kh
                                       << " s" << g.stride_h << " p" << g.pad_h;
          }
        }
      }
    }
  }
}

// Inputs with ties (values on a coarse grid) and, for max pooling, a few NaNs.
Tensor pool_input(int64_t n, DType dt, uint64_t seed, bool with_nan) {
  const Tensor r = testing::random_tensor({n}, DType::kF64, seed, -4.0, 4.0);
  std::vector<double> v(r.data<double>(), r.data<double>() + r.numel());
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::round(v[i] * 2.0) / 2.0;
    if (with_nan && i % 37 == 5) v[i] = std::numeric_limits<double>::quiet_NaN();
  }
  return from_vector<double>(v, {r.numel()}).to(dt);
}

template <typename T>
void check_pooling(const Pool2dGeometry& g, DType dt) {
  using C = compute_t<T>;
  const int64_t ins = g.h * g.w, outs = g.oh * g.ow;
  const Tensor x = pool_input(g.planes * ins, dt, 11, true), dy = pool_input(g.planes * outs, dt, 12, false);
  const Tensor xa = pool_input(g.planes * ins, dt, 13, false);
  const T* xp = x.data<T>();
  const T* dyp = dy.data<T>();
  std::vector<T> y(static_cast<size_t>(g.planes * outs)), y_hd(y.size()), dx(static_cast<size_t>(g.planes * ins)),
      dx_hd(dx.size()), ya(y.size()), ya_hd(y.size()), dxa(dx.size()), dxa_hd(dx.size());
  std::vector<int64_t> idx(y.size()), idx_hd(y.size());
  cpu::max_pool2d_forward<T>(g, xp, y.data(), idx.data());
  cpu::max_pool2d_backward<T>(g, dyp, idx.data(), dx.data());
  cpu::avg_pool2d_forward<T>(g, xa.data<T>(), ya.data());
  cpu::avg_pool2d_backward<T>(g, dyp, dxa.data());
  for (int64_t pl = 0; pl < g.planes; ++pl) {
    const T* plane = xp + pl * ins;
    const T* aplane = xa.data<T>() + pl * ins;
    for (int64_t o = 0; o < outs; ++o) {
      const int64_t oy = o / g.ow, ox = o % g.ow;
      const int64_t best = gpu::max_pool_argmax<C>(g, oy, ox, [&](int64_t i) { return static_cast<C>(plane[i]); });
      y_hd[pl * outs + o] = plane[best];
      idx_hd[pl * outs + o] = best;
      ya_hd[pl * outs + o] =
          static_cast<T>(gpu::avg_pool_value<C>(g, oy, ox, [&](int64_t i) { return static_cast<C>(aplane[i]); }));
    }
    for (int64_t i = 0; i < ins; ++i) {
      auto dy_at = [&](int64_t o) { return static_cast<C>(dyp[pl * outs + o]); };
      dx_hd[pl * ins + i] = static_cast<T>(gpu::max_pool_input_grad<C>(
          g, i / g.w, i % g.w, dy_at, [&](int64_t o) { return idx.data()[pl * outs + o]; }));
      dxa_hd[pl * ins + i] = static_cast<T>(gpu::avg_pool_input_grad<C>(g, i / g.w, i % g.w, dy_at));
    }
  }
  // Bit-for-bit: the same comparisons, the same sums in the same order, one rounding.
  auto same = [](T a, T b) {
    const double da = static_cast<double>(static_cast<C>(a)), db = static_cast<double>(static_cast<C>(b));
    return (std::isnan(da) && std::isnan(db)) || da == db;
  };
  const std::string where = std::string(dtype_name(dt)) + " k" + std::to_string(g.kh) + " s" +
                            std::to_string(g.stride_h) + " p" + std::to_string(g.pad_h) + " " + std::to_string(g.h);
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_EQ(idx[i], idx_hd[i]) << where << " output " << i;
    ASSERT_TRUE(same(y[i], y_hd[i])) << where << " output " << i;
    ASSERT_TRUE(same(ya[i], ya_hd[i])) << where << " avg output " << i;
  }
  for (size_t i = 0; i < dx.size(); ++i) {
    ASSERT_TRUE(same(dx[i], dx_hd[i])) << where << " dx " << i;
    ASSERT_TRUE(same(dxa[i], dxa_hd[i])) << where << " avg dx " << i;
  }
}

TEST(CudaCnnMath, PoolingFromTheWindowMathEqualsTheCpuKernels) {
  for (const Pool2dGeometry& g : geometries()) {
    check_pooling<float>(g, DType::kF32);
    check_pooling<double>(g, DType::kF64);
    check_pooling<Half>(g, DType::kF16);
    check_pooling<BFloat16>(g, DType::kBF16);
  }
}

template <typename T>
void check_batch_norm_elementwise(DType dt) {
  using C = compute_t<T>;
  const cpu::BatchNormGeometry g{.n = 3, .channels = 4, .spatial = 7};
  const int64_t total = g.n * g.channels * g.spatial;
  const Tensor x = testing::random_tensor({total}, dt, 21), dy = testing::random_tensor({total}, dt, 22);
  const Tensor w = testing::random_tensor({g.channels}, DType::kF64, 23, 0.5, 1.5).to(dtype_of<C>::value);
  const Tensor b = testing::random_tensor({g.channels}, DType::kF64, 24).to(dtype_of<C>::value);
  std::vector<C> mean(4), var(4), invstd(4), dw(4), db(4);
  cpu::batch_norm_stats<T>(g, x.data<T>(), mean.data(), var.data());
  for (int64_t c = 0; c < g.channels; ++c) invstd[c] = static_cast<C>(gpu::bn_invstd(var[c], 1e-5));
  std::vector<T> y(static_cast<size_t>(total)), dx(y.size());
  cpu::batch_norm_apply<T>(g, x.data<T>(), mean.data(), invstd.data(), w.data<C>(), b.data<C>(), y.data());
  for (cpu::BatchStats stats : {cpu::BatchStats::kFromBatch, cpu::BatchStats::kConstant}) {
    cpu::batch_norm_backward<T>(g, stats, dy.data<T>(), x.data<T>(), mean.data(), invstd.data(), w.data<C>(), dx.data(),
                                dw.data(), db.data());
    for (int64_t e = 0; e < total; ++e) {
      const int64_t c = (e / g.spatial) % g.channels;
      const C xv = static_cast<C>(x.data<T>()[e]), dv = static_cast<C>(dy.data<T>()[e]);
      const C m = static_cast<C>(g.count());
      const bool batch = stats == cpu::BatchStats::kFromBatch;
      // Given the CPU's sums (dw, db), the per-element formulas give the CPU's results bit for bit.
      const T yv = static_cast<T>(gpu::bn_apply<C>(xv, mean[c], invstd[c], w.data<C>()[c], b.data<C>()[c]));
      const T dxv = static_cast<T>(gpu::bn_input_grad<C>(dv, xv, mean[c], invstd[c], w.data<C>()[c] * invstd[c],
                                                         batch ? db[c] / m : C(0), batch ? dw[c] / m : C(0)));
      ASSERT_EQ(static_cast<double>(static_cast<C>(yv)), static_cast<double>(static_cast<C>(y[e])))
          << dtype_name(dt) << " y " << e;
      ASSERT_EQ(static_cast<double>(static_cast<C>(dxv)), static_cast<double>(static_cast<C>(dx[e])))
          << dtype_name(dt) << " dx " << e;
    }
  }
  // dw's summands: the CPU sums d * (x - mean) * invstd; the same terms summed in plain order agree to
  // the f32 rounding of a 21-term sum (relative 1e-5 is ~100 ulp of slack).
  for (int64_t c = 0; c < g.channels; ++c) {
    double s = 0;
    for (int64_t i = 0; i < g.n; ++i) {
      for (int64_t k = 0; k < g.spatial; ++k) {
        const int64_t e = (i * g.channels + c) * g.spatial + k;
        s += gpu::bn_dy_xhat<C>(static_cast<C>(dy.data<T>()[e]), static_cast<C>(x.data<T>()[e]), mean[c], invstd[c]);
      }
    }
    EXPECT_NEAR(s, static_cast<double>(dw[c]), 1e-5 * (1.0 + std::abs(s))) << dtype_name(dt) << " dw " << c;
  }
}

TEST(CudaCnnMath, BatchNormElementFormulasEqualTheCpuKernels) {
  check_batch_norm_elementwise<float>(DType::kF32);
  check_batch_norm_elementwise<double>(DType::kF64);
  check_batch_norm_elementwise<Half>(DType::kF16);
  check_batch_norm_elementwise<BFloat16>(DType::kBF16);
}

// The running update, unbiased variance and invstd in f64 give ops/norm/norm.cc's CPU results bit for bit,
// from the batch statistics of the CPU kernel.
TEST(CudaCnnMath, BatchNormRunningStatisticsEqualTheCpuOp) {
  const cpu::BatchNormGeometry g{.n = 5, .channels = 3, .spatial = 4};
  const Tensor x = testing::random_tensor({g.n, g.channels, 2, 2}, DType::kF32, 31);
  const Tensor rm0 = testing::random_tensor({3}, DType::kF32, 32),
               rv0 = testing::random_tensor({3}, DType::kF32, 33, 0.5, 2);
  const Tensor rm = rm0.clone(), rv = rv0.clone();
  const double momentum = 0.3, eps = 1e-3;
  batch_norm(x, rm, rv, Tensor(), Tensor(), BatchNormMode::kTrain, momentum, eps);
  std::vector<float> mean(3), var(3);
  cpu::batch_norm_stats<float>(g, x.data<float>(), mean.data(), var.data());
  for (int64_t c = 0; c < 3; ++c) {
    const float want_m = static_cast<float>(gpu::bn_running_update(rm0.data<float>()[c], mean[c], momentum));
    const float want_v =
        static_cast<float>(gpu::bn_running_update(rv0.data<float>()[c], gpu::bn_unbiased(var[c], g.count()), momentum));
    EXPECT_EQ(want_m, rm.data<float>()[c]) << c;
    EXPECT_EQ(want_v, rv.data<float>()[c]) << c;
  }
  // Eval mode normalizes with invstd = 1 / sqrt(running_var + eps), rounded once to f32.
  const Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), BatchNormMode::kEval, momentum, eps);
  for (int64_t e = 0; e < x.numel(); ++e) {
    const int64_t c = (e / g.spatial) % g.channels;
    const float is = static_cast<float>(gpu::bn_invstd(rv.data<float>()[c], eps));
    EXPECT_EQ(gpu::bn_apply<float>(x.data<float>()[e], rm.data<float>()[c], is, 1.0f, 0.0f), y.data<float>()[e]) << e;
  }
}

}  // namespace
}  // namespace mantissa

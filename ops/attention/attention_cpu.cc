// Fused attention on the CPU (FlashAttention-2's schedule, Dao 2023, for a cache instead of shared memory).
//
// Forward, per (batch-head n, block of kQueryBlock queries): the queries are widened to C once; then for
// each block of kKeyBlock visible keys, S = scale * Q K^T (one small GEMM), the running max m and sum l of
// every row are updated online, P = exp(S - m) (dropped out as dropout() would), and O = O * exp(m_old -
// m) + P V (a second GEMM). At the end O / l rounds once into the output, and m + log(l) is saved.
//
// Backward, per batch-head n (its dK and dV are owned by one thread, so no atomics): each key block
// accumulates dV += P^T dO and dK += scale dS^T Q over the query blocks that see it, and dQ += scale dS K,
// with P = exp(S - lse) recomputed and dS = P * (dP - rowsum(dO * O)). Five GEMMs per tile, no weights
// kept between the passes: memory O(L + S) per head instead of the composed path's O(L S).
//
// For 16-bit inputs P and dS round to the inputs' dtype before the GEMMs that take them (round_operands:
// the tensor-core contract, which PyTorch's fused CPU kernel keeps too); everything else is C.
//
// The GEMMs are cpu::gemm's (oneDNN sgemm for f32, OpenBLAS for f64), called from inside parallel_for,
// where they run on the calling thread.
#include "ops/attention/attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "framework/convert.h"
#include "framework/parallel.h"
#include "ops/cpu/compute_buffer.h"
#include "ops/cpu/row_reduce.h"
#include "ops/cpu/vec_math.h"
#include "ops/matmul/gemm_cpu.h"

namespace mantissa::cpu {
namespace {

constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 128;

// rows x cols of one operand from row `first` of batch n, as a GEMM operand (pointer and row stride): the
// rows in place when they are already C (they are row_stride apart within a batch), else widened into
// `scratch` (dense, row stride cols).
template <typename C>
struct Rows {
  const C* p;
  int64_t ld;
};

template <typename T, typename C>
Rows<C> rows_of(const T* base, const AttentionRows& a, int64_t n, int64_t first, int64_t rows, int64_t cols,
                C* scratch) {
  if constexpr (std::is_same_v<T, C>) {
    return {base + a.offset(n, first), a.row_stride};
  } else {
    for (int64_t r = 0; r < rows; ++r) convert(base + a.offset(n, first + r), scratch + r * cols, cols);
    return {scratch, cols};
  }
}

struct AttentionScratch {};
template <typename C, int kSlot>
C* scratch(int64_t count) {
  return thread_scratch<C, AttentionScratch, kSlot>(count);
}

template <typename T, typename C>
void store_rows(const C* src, int64_t count, T* dst) {
  if constexpr (std::is_same_v<T, C>) {
    std::copy(src, src + count, dst);
  } else {
    convert(src, dst, count);
  }
}

// C = alpha * op(A) op(B) + beta * C over dense row-major buffers.
template <typename C>
void tile_gemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, double alpha, const C* a, int64_t lda, const C* b,
               int64_t ldb, double beta, C* c, int64_t ldc) {
  gemm(GemmArgs<C>{.trans_a = ta,
                   .trans_b = tb,
                   .m = m,
                   .n = n,
                   .k = k,
                   .a = a,
                   .lda = lda,
                   .b = b,
                   .ldb = ldb,
                   .c = c,
                   .ldc = ldc,
                   .alpha = alpha,
                   .beta = beta});
}

// The tensor-core contract for 16-bit T: a GEMM's operands are T, its sums f32. The weights P and their
// gradient dS are GEMM operands, so they round to T first (as FlashAttention on the GPU and PyTorch's
// fused CPU kernel round them); scores, row max, row sums and every accumulation stay in C.
template <typename T, typename C>
void round_operands(C* x, int64_t n) {
  if constexpr (!std::is_same_v<T, C>) {
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<C>(static_cast<T>(x[i]));
  }
}

// The dropout factors of row i's keys [j0, j0 + cols) into f (0 or 1 / keep).
template <typename C>
void dropout_factors(const AttentionDropout& d, const AttentionShape& s, int64_t n, int64_t i, int64_t j0, int64_t cols,
                     C* f) {
  // One Philox block per four words, as the Generator draws them (d.factor would make one per word).
  uint64_t word = d.position + static_cast<uint64_t>((n * s.L + i) * s.S + j0);
  for (int64_t c = 0; c < cols;) {
    const Philox4 block = gpu::generator_block(d.seed, word / 4);
    for (uint64_t k = word % 4; k < 4 && c < cols; ++k, ++c, ++word) {
      f[c] = static_cast<C>(d.factor_of_word(block.v[k]));
    }
  }
}

template <typename T>
void forward_block(const AttentionForwardArgs<T>& a, int64_t n, int64_t i0) {
  using C = compute_t<T>;
  const AttentionShape& s = a.shape;
  const int64_t rows = std::min(kQueryBlock, s.L - i0);
  const int64_t j_end = s.causal ? std::min(s.S, i0 + rows) : s.S;
  C* p = scratch<C, 0>(rows * kKeyBlock);
  C* o = scratch<C, 1>(rows * s.Dv);
  C* m = scratch<C, 2>(rows);
  C* l = scratch<C, 3>(rows);
  C* drop = scratch<C, 4>(kKeyBlock);
  std::fill(o, o + rows * s.Dv, C(0));
  std::fill(m, m + rows, -std::numeric_limits<C>::infinity());
  std::fill(l, l + rows, C(0));
  const Rows<C> q = rows_of(a.q, a.q_rows, n, i0, rows, s.D, scratch<C, 5>(rows * s.D));
  for (int64_t j0 = 0; j0 < j_end; j0 += kKeyBlock) {
    const int64_t cols = std::min(kKeyBlock, j_end - j0);
    const Rows<C> k = rows_of(a.k, a.k_rows, n, j0, cols, s.D, scratch<C, 6>(cols * s.D));
    const Rows<C> v = rows_of(a.v, a.v_rows, n, j0, cols, s.Dv, scratch<C, 7>(cols * s.Dv));
    tile_gemm<C>(Trans::kNo, Trans::kYes, rows, cols, s.D, static_cast<double>(a.scale), q.p, q.ld, k.p, k.ld, 0.0, p,
                 cols);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      C* row = p + r * cols;
      const int64_t seen = std::clamp<int64_t>(s.visible_keys(i) - j0, 0, cols);
      const C m_new = std::max(m[r], row_max(row, seen));  // vectorized; a NaN score shows in the sum below
      if (m_new == -std::numeric_limits<C>::infinity()) {  // nothing visible yet, or only NaN: adds nothing
        if (std::any_of(row, row + seen, [](C x) { return x != x; })) l[r] = std::numeric_limits<C>::quiet_NaN();
        std::fill(row, row + cols, C(0));
        continue;
      }
      const C alpha = exp_compute<C>(m[r] - m_new);  // exp(-inf) = 0 on the first visible tile
      const C sum = row_sum_exp(row, seen, m_new, row);
      std::fill(row + seen, row + cols, C(0));
      if (a.dropout.active()) {
        dropout_factors(a.dropout, s, n, i, j0, seen, drop);
        for (int64_t c = 0; c < seen; ++c) row[c] *= drop[c];
      }
      round_operands<T>(row, seen);
      l[r] = l[r] * alpha + sum;
      m[r] = m_new;
      if (alpha != C(1)) {
        C* orow = o + r * s.Dv;
        for (int64_t d = 0; d < s.Dv; ++d) orow[d] *= alpha;
      }
    }
    tile_gemm<C>(Trans::kNo, Trans::kNo, rows, s.Dv, cols, 1.0, p, cols, v.p, v.ld, 1.0, o, s.Dv);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const C inv = C(1) / l[r];  // l > 0: a causal row sees key 0, and S > 0 (else the entry never calls)
    C* orow = o + r * s.Dv;
    for (int64_t d = 0; d < s.Dv; ++d) orow[d] *= inv;
    a.lse[n * s.L + i0 + r] = m[r] + std::log(l[r]);
  }
  store_rows(o, rows * s.Dv, a.out + (n * s.L + i0) * s.Dv);
}

template <typename T>
void backward_head(const AttentionBackwardArgs<T>& a, int64_t n) {
  using C = compute_t<T>;
  const AttentionForwardArgs<T>& f = a.forward;
  const AttentionShape& s = f.shape;
  const AttentionRows dense_out{.inner_size = 1, .outer_stride = s.L * s.Dv, .inner_stride = 0, .row_stride = s.Dv};
  const Rows<C> q = rows_of(f.q, f.q_rows, n, 0, s.L, s.D, scratch<C, 0>(s.L * s.D));
  const Rows<C> k = rows_of(f.k, f.k_rows, n, 0, s.S, s.D, scratch<C, 1>(s.S * s.D));
  const Rows<C> v = rows_of(f.v, f.v_rows, n, 0, s.S, s.Dv, scratch<C, 2>(s.S * s.Dv));
  const Rows<C> dout = rows_of(a.dout, dense_out, n, 0, s.L, s.Dv, scratch<C, 3>(s.L * s.Dv));
  const Rows<C> out = rows_of(f.out, dense_out, n, 0, s.L, s.Dv, scratch<C, 4>(s.L * s.Dv));
  C* delta = scratch<C, 5>(s.L);
  C* dq = scratch<C, 6>(s.L * s.D);
  C* dk = scratch<C, 7>(kKeyBlock * s.D);
  C* dv = scratch<C, 8>(kKeyBlock * s.Dv);
  C* p = scratch<C, 9>(kQueryBlock * kKeyBlock);
  C* pd = scratch<C, 10>(kQueryBlock * kKeyBlock);
  C* ds = scratch<C, 11>(kQueryBlock * kKeyBlock);
  C* drop = scratch<C, 12>(kKeyBlock);
  // delta_i = sum_d dO_id O_id = sum_j P_ij dP_ij (with dropout too: O is the dropped-out weights' product).
  for (int64_t i = 0; i < s.L; ++i) delta[i] = row_dot(dout.p + i * dout.ld, out.p + i * out.ld, s.Dv);
  std::fill(dq, dq + s.L * s.D, C(0));
  const C* lse = f.lse + n * s.L;
  const double scale = static_cast<double>(f.scale);
  for (int64_t j0 = 0; j0 < s.S; j0 += kKeyBlock) {
    const int64_t cols = std::min(kKeyBlock, s.S - j0);
    std::fill(dk, dk + cols * s.D, C(0));
    std::fill(dv, dv + cols * s.Dv, C(0));
    const C* kj = k.p + j0 * k.ld;
    const C* vj = v.p + j0 * v.ld;
    const int64_t i_first = s.causal ? std::min(j0, s.L) / kQueryBlock * kQueryBlock : 0;  // earlier rows see none
    for (int64_t i0 = i_first; i0 < s.L; i0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, s.L - i0);
      const C* qi = q.p + i0 * q.ld;
      const C* doi = dout.p + i0 * dout.ld;
      tile_gemm<C>(Trans::kNo, Trans::kYes, rows, cols, s.D, scale, qi, q.ld, kj, k.ld, 0.0, p, cols);
      tile_gemm<C>(Trans::kNo, Trans::kYes, rows, cols, s.Dv, 1.0, doi, dout.ld, vj, v.ld, 0.0, ds, cols);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        C* prow = p + r * cols;
        C* pdrow = pd + r * cols;
        C* dsrow = ds + r * cols;  // holds dP (of the dropped-out weights) on entry
        const int64_t seen = std::clamp<int64_t>(s.visible_keys(i) - j0, 0, cols);
        const C lse_i = lse[i], delta_i = delta[i];
        for (int64_t c = 0; c < seen; ++c) prow[c] = exp_compute<C>(prow[c] - lse_i);
        std::fill(prow + seen, prow + cols, C(0));
        if (f.dropout.active()) {
          dropout_factors(f.dropout, s, n, i, j0, seen, drop);
          std::fill(drop + seen, drop + cols, C(0));
          for (int64_t c = 0; c < cols; ++c) {
            pdrow[c] = prow[c] * drop[c];
            dsrow[c] = prow[c] * (dsrow[c] * drop[c] - delta_i);
          }
        } else {
          for (int64_t c = 0; c < cols; ++c) {
            pdrow[c] = prow[c];
            dsrow[c] = prow[c] * (dsrow[c] - delta_i);
          }
        }
        round_operands<T>(pdrow, cols);
        round_operands<T>(dsrow, cols);
      }
      tile_gemm<C>(Trans::kYes, Trans::kNo, cols, s.Dv, rows, 1.0, pd, cols, doi, dout.ld, 1.0, dv, s.Dv);
      tile_gemm<C>(Trans::kNo, Trans::kNo, rows, s.D, cols, scale, ds, cols, kj, k.ld, 1.0, dq + i0 * s.D, s.D);
      tile_gemm<C>(Trans::kYes, Trans::kNo, cols, s.D, rows, scale, ds, cols, qi, q.ld, 1.0, dk, s.D);
    }
    store_rows(dk, cols * s.D, a.dk + (n * s.S + j0) * s.D);
    store_rows(dv, cols * s.Dv, a.dv + (n * s.S + j0) * s.Dv);
  }
  store_rows(dq, s.L * s.D, a.dq + n * s.L * s.D);
}

}  // namespace

template <typename T>
void attention_forward(const AttentionForwardArgs<T>& a) {
  const int64_t blocks = (a.shape.L + kQueryBlock - 1) / kQueryBlock;
  parallel_for(a.shape.N * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) forward_block(a, t / blocks, t % blocks * kQueryBlock);
  });
}

template <typename T>
void attention_backward(const AttentionBackwardArgs<T>& a) {
  parallel_for(a.forward.shape.N, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) backward_head(a, n);
  });
}

#define MT_ATTENTION_INSTANTIATE(T)                                        \
  template void attention_forward<T>(const AttentionForwardArgs<T>& args); \
  template void attention_backward<T>(const AttentionBackwardArgs<T>& args)
MT_ATTENTION_INSTANTIATE(float);
MT_ATTENTION_INSTANTIATE(double);
MT_ATTENTION_INSTANTIATE(Half);
MT_ATTENTION_INSTANTIATE(BFloat16);
#undef MT_ATTENTION_INSTANTIATE

}  // namespace mantissa::cpu

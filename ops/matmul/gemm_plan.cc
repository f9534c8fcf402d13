// Host-side GEMM planning (ops/matmul/gemm_plan.h): built in every configuration, tested on the CPU.
#include "ops/matmul/gemm_plan.h"

#include <bit>
#include <string>

#include "framework/error.h"
#include "ops/cuda/plan_hash.h"

namespace mantissa::gpu {

ColMajorGemm to_column_major(const RowMajorGemm& g) {
  using cpu::Trans;
  ColMajorGemm c;
  c.m = g.n;
  c.n = g.m;
  c.k = g.k;
  // cuBLAS's A is our B: stored [k, n] row-major = [n, k] column-major, used as is; or, when our B is
  // stored transposed ([n, k] row-major = [k, n] column-major), used transposed.
  c.a = g.trans_b == Trans::kNo ? ColMajorOperand{Trans::kNo, g.n, g.k, g.ldb, g.stride_b}
                                : ColMajorOperand{Trans::kYes, g.k, g.n, g.ldb, g.stride_b};
  // cuBLAS's B is our A: [m, k] row-major = [k, m] column-major; or [k, m] row-major = [m, k], transposed.
  c.b = g.trans_a == Trans::kNo ? ColMajorOperand{Trans::kNo, g.k, g.m, g.lda, g.stride_a}
                                : ColMajorOperand{Trans::kYes, g.m, g.k, g.lda, g.stride_a};
  c.ldc = g.ldc;
  c.stride_c = g.stride_c;
  c.batch = g.batch;
  return c;
}

int alignment_bytes(uintptr_t address, int64_t batch_stride_bytes) {
  constexpr uint64_t kMax = 256;
  uint64_t bits = static_cast<uint64_t>(address) | static_cast<uint64_t>(batch_stride_bytes) | kMax;
  return static_cast<int>(uint64_t{1} << std::countr_zero(bits));
}

bool operator==(const GemmKey& x, const GemmKey& y) {
  return x.device == y.device && x.dtype == y.dtype && x.math == y.math && x.epilogue == y.epilogue &&
         x.gemm.m == y.gemm.m && x.gemm.n == y.gemm.n && x.gemm.k == y.gemm.k && x.gemm.a == y.gemm.a &&
         x.gemm.b == y.gemm.b && x.gemm.ldc == y.gemm.ldc && x.gemm.stride_c == y.gemm.stride_c &&
         x.gemm.batch == y.gemm.batch && x.align_a == y.align_a && x.align_b == y.align_b && x.align_c == y.align_c &&
         x.align_bias == y.align_bias;
}

size_t GemmKeyHash::operator()(const GemmKey& key) const {
  const ColMajorGemm& g = key.gemm;
  return static_cast<size_t>(hash_fields({key.device,
                                          static_cast<int64_t>(key.dtype),
                                          static_cast<int64_t>(key.math),
                                          static_cast<int64_t>(key.epilogue),
                                          g.m,
                                          g.n,
                                          g.k,
                                          static_cast<int64_t>(g.a.trans),
                                          g.a.rows,
                                          g.a.cols,
                                          g.a.ld,
                                          g.a.batch_stride,
                                          static_cast<int64_t>(g.b.trans),
                                          g.b.rows,
                                          g.b.cols,
                                          g.b.ld,
                                          g.b.batch_stride,
                                          g.ldc,
                                          g.stride_c,
                                          g.batch,
                                          key.align_a,
                                          key.align_b,
                                          key.align_c,
                                          key.align_bias}));
}

std::string describe(const GemmKey& key) {
  const ColMajorGemm& g = key.gemm;
  auto operand = [](const char* name, const ColMajorOperand& x, int align) {
    return detail::cat(name, " ", x.trans == cpu::Trans::kYes ? "T " : "N ", x.rows, "x", x.cols, " ld ", x.ld,
                       " batch stride ", x.batch_stride, " aligned ", align, " B");
  };
  return detail::cat(dtype_name(key.dtype), key.math == GemmMath::kTf32 ? " (tf32)" : "",
                     " GEMM in cuBLAS's column-major terms (its A is the row-major B) m ", g.m, " n ", g.n, " k ", g.k,
                     ", batch ", g.batch, "; ", operand("A", g.a, key.align_a), "; ", operand("B", g.b, key.align_b),
                     "; C ld ", g.ldc, " batch stride ", g.stride_c, " aligned ", key.align_c, " B",
                     key.epilogue == GemmEpilogue::kBias ? detail::cat("; bias epilogue aligned ", key.align_bias, " B")
                                                         : std::string());
}

LtVerdict lt_matmul_verdict(int status) {
  if (status == static_cast<int>(CublasStatus::kSuccess)) return LtVerdict::kUse;
  if (status == static_cast<int>(CublasStatus::kNotSupported)) return LtVerdict::kDecline;
  return LtVerdict::kRaise;
}

LtVerdict lt_heuristic_verdict(int status, int count, int algo_state, size_t algo_workspace, size_t workspace_limit) {
  if (status == static_cast<int>(CublasStatus::kNotSupported)) return LtVerdict::kDecline;
  if (status != static_cast<int>(CublasStatus::kSuccess)) return LtVerdict::kRaise;
  const bool usable =
      count > 0 && algo_state == static_cast<int>(CublasStatus::kSuccess) && algo_workspace <= workspace_limit;
  return usable ? LtVerdict::kUse : LtVerdict::kDecline;
}

}  // namespace mantissa::gpu

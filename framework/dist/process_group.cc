// The argument checks every ProcessGroup backend shares, the world-of-one group, and init_process_group,
// which picks the MPI backend when mantissa is built with it.
#include "framework/dist/process_group.h"

#include "framework/error.h"

#if MANTISSA_WITH_MPI
#include "framework/dist/mpi_process_group.h"
#endif

namespace mantissa {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

namespace dist_detail {

void check_tensor(const Tensor& t, std::string_view op) {
  MT_CHECK(t.defined(), op, ": the tensor is undefined. HINT: pass a tensor allocated on every rank");
  MT_CHECK(t.device().is_cpu(), op, ": expected a CPU tensor, got one on ", t.device().str(), " ", shape_str(t.shape()),
           " ", dtype_name(t.dtype()), ". HINT: the MPI process group reduces CPU tensors; copy to the CPU first");
  MT_CHECK(t.is_contiguous(), op, ": expected a contiguous tensor, got ", shape_str(t.shape()), " ",
           dtype_name(t.dtype()), " with strides ", shape_str(t.strides()),
           ". HINT: collectives work in place on the storage; call .contiguous() and copy the result back");
}

void check_reducible(const Tensor& t, ReduceOp reduce, std::string_view op) {
  check_tensor(t, op);
  const DType d = t.dtype();
  MT_CHECK(is_floating(d) || d == DType::kI64, op, ": dtype ", dtype_name(d), " cannot be reduced, tensor ",
           shape_str(t.shape()), ". HINT: all_reduce takes f32, f64, f16, bf16 and i64");
  MT_CHECK(!(d == DType::kI64 && reduce == ReduceOp::kAvg), op,
           ": avg of an i64 tensor is not defined (the mean is not an integer), tensor ", shape_str(t.shape()),
           ". HINT: reduce with kSum and divide, or convert to f64 first");
}

void check_regions(const Tensor& t, std::span<const int64_t> counts, int size, std::string_view op) {
  check_tensor(t, op);
  MT_CHECK(t.dim() == 1 && (t.dtype() == DType::kF32 || t.dtype() == DType::kF64), op,
           ": expected a 1-D f32 or f64 tensor, got ", shape_str(t.shape()), " ", dtype_name(t.dtype()),
           ". HINT: the regions are cut from a flat buffer (DDP's buckets)");
  MT_CHECK(counts.size() == static_cast<size_t>(size), op, ": ", counts.size(), " counts for a world of ", size,
           " ranks. HINT: one count per rank");
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    MT_CHECK(counts[r] >= 0, op, ": rank ", r, "'s count is ", counts[r], "; counts must be >= 0");
    total += counts[r];
  }
  MT_CHECK(total == t.numel(), op, ": the counts add up to ", total, " but the tensor has ", t.numel(),
           " elements. HINT: the regions must cover the tensor exactly");
}

}  // namespace dist_detail

std::unique_ptr<Work> ProcessGroup::reduce_scatter_async(const Tensor& t, std::span<const int64_t> counts,
                                                         ReduceOp /*op*/) {
  dist_detail::check_regions(t, counts, size(), "reduce_scatter");
  MT_THROW("reduce_scatter: the '", backend(), "' process group does not implement it. HINT: ZeRO-1 runs over ",
           "the MPI group (CPU tensors) or a world of one");
}

void ProcessGroup::all_gather_regions(const Tensor& t, std::span<const int64_t> counts) {
  dist_detail::check_regions(t, counts, size(), "all_gather_regions");
  MT_THROW("all_gather_regions: the '", backend(), "' process group does not implement it. HINT: ZeRO-1 runs ",
           "over the MPI group (CPU tensors) or a world of one");
}

namespace {

class LocalWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

class LocalProcessGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string_view backend() const override { return "local"; }

  std::unique_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    dist_detail::check_reducible(t, op, "all_reduce");
    return std::make_unique<LocalWork>();  // sum, avg and max over one rank are the identity
  }
  void broadcast(const Tensor& t, int root) override {
    dist_detail::check_tensor(t, "broadcast");
    MT_CHECK(root == 0, "broadcast: root ", root, " is not a rank of a world of 1. HINT: root must be 0");
  }
  std::unique_ptr<Work> reduce_scatter_async(const Tensor& t, std::span<const int64_t> counts, ReduceOp op) override {
    dist_detail::check_regions(t, counts, 1, "reduce_scatter");
    MT_CHECK(op != ReduceOp::kAvg, "reduce_scatter: kAvg is not offered (DDP divides before the sum)");
    return std::make_unique<LocalWork>();  // one rank's region is the whole tensor, reduced over itself
  }
  void all_gather_regions(const Tensor& t, std::span<const int64_t> counts) override {
    dist_detail::check_regions(t, counts, 1, "all_gather_regions");
  }
  Tensor all_gather(const Tensor& t) override {
    dist_detail::check_tensor(t, "all_gather");
    return t.clone().unsqueeze(0);
  }
  void barrier() override {}
};

}  // namespace

std::unique_ptr<ProcessGroup> make_local_process_group() { return std::make_unique<LocalProcessGroup>(); }

std::unique_ptr<ProcessGroup> init_process_group(ProcessGroupOptions options) {
#if MANTISSA_WITH_MPI
  return make_mpi_process_group(options);
#else
  (void)options;
  return make_local_process_group();
#endif
}

void finalize_process_groups() {
#if MANTISSA_WITH_MPI
  finalize_mpi_if_ours();
#endif
}

}  // namespace mantissa

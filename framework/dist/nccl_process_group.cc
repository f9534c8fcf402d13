// make_device_dispatch_group: one group over a CPU group and a GPU group, in every build. The NCCL group
// itself is framework/dist/cuda/host/nccl_process_group.cc (CUDA builds; framework/dist/cuda/absent/ without).
#include "framework/dist/nccl_process_group.h"

#include "framework/error.h"

namespace mantissa {
namespace {

class DeviceDispatchGroup final : public ProcessGroup {
 public:
  DeviceDispatchGroup(std::unique_ptr<ProcessGroup> cpu, std::unique_ptr<ProcessGroup> gpu)
      : cpu_(std::move(cpu)), gpu_(std::move(gpu)) {}
  int rank() const override { return cpu_->rank(); }
  int size() const override { return cpu_->size(); }
  int local_rank() const override { return cpu_->local_rank(); }
  std::string_view backend() const override { return "cpu:mpi,cuda:nccl"; }
  std::unique_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    return of(t).all_reduce_async(t, op);
  }
  void broadcast(const Tensor& t, int root) override { of(t).broadcast(t, root); }
  Tensor all_gather(const Tensor& t) override { return of(t).all_gather(t); }
  std::unique_ptr<Work> reduce_scatter_async(const Tensor& t, std::span<const int64_t> counts, ReduceOp op) override {
    return of(t).reduce_scatter_async(t, counts, op);
  }
  void all_gather_regions(const Tensor& t, std::span<const int64_t> counts) override {
    of(t).all_gather_regions(t, counts);
  }
  void barrier() override {
    gpu_->barrier();
    cpu_->barrier();
  }

 private:
  ProcessGroup& of(const Tensor& t) const { return t.defined() && t.device().is_cuda() ? *gpu_ : *cpu_; }
  std::unique_ptr<ProcessGroup> cpu_, gpu_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_device_dispatch_group(std::unique_ptr<ProcessGroup> cpu_group,
                                                         std::unique_ptr<ProcessGroup> cuda_group) {
  MT_CHECK(cpu_group && cuda_group, "make_device_dispatch_group: both groups are needed");
  MT_CHECK(cpu_group->size() == cuda_group->size() && cpu_group->rank() == cuda_group->rank(),
           "make_device_dispatch_group: the groups differ: rank ", cpu_group->rank(), " of ", cpu_group->size(), " (",
           cpu_group->backend(), ") and rank ", cuda_group->rank(), " of ", cuda_group->size(), " (",
           cuda_group->backend(), ")");
  return std::make_unique<DeviceDispatchGroup>(std::move(cpu_group), std::move(cuda_group));
}

}  // namespace mantissa

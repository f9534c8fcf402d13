// NCCL ProcessGroup: a communicator per group, a side stream for its collectives, events to order them
// against the caller's current stream. Without MANTISSA_WITH_CUDA only the refusing factory is built.
#include "framework/dist/nccl_process_group.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "framework/cuda/device.h"
#include "framework/error.h"

#ifdef MANTISSA_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#endif

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

#ifndef MANTISSA_WITH_CUDA

std::unique_ptr<ProcessGroup> make_nccl_process_group(ProcessGroup& bootstrap, Device device,
                                                      ProcessGroupOptions options) {
  (void)bootstrap;
  (void)options;
  MT_THROW("make_nccl_process_group: cannot use ", device.str(), ": ", cuda_unavailable_reason(),
           ". HINT: NCCL needs mantissa built with CUDA; CPU tensors use the MPI group (init_process_group)");
}

#else

#define MT_NCCL_CHECK(expr)                                                                                           \
  do {                                                                                                                \
    const ncclResult_t mt_nccl_res_ = (expr);                                                                         \
    if (mt_nccl_res_ != ncclSuccess) [[unlikely]] {                                                                   \
      MT_THROW("NCCL error: ", #expr, " failed: ", ncclGetErrorString(mt_nccl_res_), " (", ncclGetLastError(nullptr), \
               ")");                                                                                                  \
    }                                                                                                                 \
  } while (0)

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_dtype(DType d, std::string_view op) {
  switch (d) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI64: return ncclInt64;
    case DType::kI32: return ncclInt32;
    case DType::kBool: return ncclUint8;
  }
  MT_THROW(op, ": dtype ", dtype_name(d), " has no NCCL type");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  return ncclSum;
}

// What the group and its works share: the communicator, its stream, and whether a timeout broke it.
struct NcclState {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  Device device;
  std::chrono::milliseconds timeout{0};
  bool broken = false;

  ~NcclState() {
    if (comm != nullptr) (void)(broken ? ncclCommAbort(comm) : ncclCommDestroy(comm));
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }

  void check_usable(std::string_view op) const {
    MT_CHECK(!broken, op,
             ": the NCCL process group is broken by an earlier timeout or error. HINT: the job "
             "cannot continue; restart it from the last checkpoint");
  }

  // Blocks the host until `event` has completed; past the timeout (or on an asynchronous NCCL error) the
  // communicator is aborted so no rank stays blocked in it, and this throws naming `op`.
  void host_wait(cudaEvent_t event, std::string_view op) {
    const Clock::time_point start = Clock::now();
    for (;;) {
      const cudaError_t q = cudaEventQuery(event);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) MT_CUDA_CHECK(q);
      ncclResult_t async = ncclSuccess;
      MT_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
      if (async != ncclSuccess) {
        broken = true;
        (void)ncclCommAbort(comm);
        comm = nullptr;
        MT_THROW(op, ": NCCL reported an error while waiting: ", ncclGetErrorString(async),
                 ". HINT: another rank may have died; the job must restart from its last checkpoint");
      }
      if (Clock::now() - start > timeout) {
        broken = true;
        (void)ncclCommAbort(comm);
        comm = nullptr;
        MT_THROW(op, ": waited ", timeout.count(),
                 " ms and the other ranks did not join (timed out). HINT: "
                 "a rank died or the ranks called collectives in different orders; raise .timeout if a rank "
                 "is legitimately slow");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
};

// An event recorded on the group's stream after a collective, plus what must stay alive until it runs:
// the tensor (and, for 16-bit all-reduces, the f32 staging copy and the copy back into the tensor).
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, cudaEvent_t done, Tensor keep)
      : state_(std::move(state)), done_(done), keep_(std::move(keep)) {}
  ~NcclWork() override {
    if (!waited_) {
      try {
        wait();
      } catch (const std::exception&) {
      }
    }
    (void)cudaEventDestroy(done_);
  }

  void wait() override {
    waited_ = true;
    MT_CUDA_CHECK(cudaStreamWaitEvent(gpu::current_stream(state_->device), done_, 0));
  }
  bool is_completed() override {
    const cudaError_t q = cudaEventQuery(done_);
    if (q == cudaErrorNotReady) return false;
    MT_CUDA_CHECK(q);
    return true;
  }

 private:
  std::shared_ptr<NcclState> state_;
  cudaEvent_t done_;
  Tensor keep_;
  bool waited_ = false;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(ProcessGroup& bootstrap, Device device, ProcessGroupOptions options)
      : rank_(bootstrap.rank()),
        size_(bootstrap.size()),
        local_rank_(bootstrap.local_rank()),
        state_(std::make_shared<NcclState>()) {
    state_->device = device;
    state_->timeout = options.timeout;
    gpu::DeviceGuard guard(device);
    // Rank 0 creates the id; the bootstrap group (CPU) carries its bytes to the others.
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) MT_NCCL_CHECK(ncclGetUniqueId(&id));
    Tensor bytes = empty({static_cast<int64_t>(sizeof(id))}, {.dtype = DType::kBool});
    std::memcpy(bytes.data_ptr(), &id, sizeof(id));
    bootstrap.broadcast(bytes, 0);
    std::memcpy(&id, bytes.data_ptr(), sizeof(id));
    MT_NCCL_CHECK(ncclCommInitRank(&state_->comm, size_, id, rank_));
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  std::string_view backend() const override { return "nccl"; }

  std::unique_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    check(t, "all_reduce");
    MT_CHECK(is_floating(t.dtype()) || t.dtype() == DType::kI64, "all_reduce: dtype ", dtype_name(t.dtype()),
             " cannot be reduced, tensor ", shape_str(t.shape()),
             ". HINT: all_reduce takes f32, f64, f16, bf16 "
             "and i64");
    MT_CHECK(!(t.dtype() == DType::kI64 && op == ReduceOp::kAvg),
             "all_reduce: avg of an i64 tensor is not "
             "defined, tensor ",
             shape_str(t.shape()), ". HINT: reduce with kSum and divide");
    gpu::DeviceGuard guard(state_->device);
    const bool narrow = t.dtype() == DType::kF16 || t.dtype() == DType::kBF16;
    // 16-bit values are widened on the caller's stream, reduced in f32, and rounded once on the way back.
    Tensor work_tensor = narrow ? t.to(DType::kF32) : t;
    enter_stream();
    MT_NCCL_CHECK(ncclAllReduce(work_tensor.data_ptr(), work_tensor.data_ptr(), static_cast<size_t>(t.numel()),
                                nccl_dtype(work_tensor.dtype(), "all_reduce"), nccl_op(op), state_->comm,
                                state_->stream));
    if (narrow) {
      gpu::StreamGuard on_group_stream(state_->device.index, state_->stream);
      copy_(t, work_tensor);  // runs on the group's stream, after the reduction
    }
    return finish(narrow ? work_tensor : t);
  }

  void broadcast(const Tensor& t, int root) override {
    check(t, "broadcast");
    MT_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of this group of ", size_);
    gpu::DeviceGuard guard(state_->device);
    enter_stream();
    MT_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, state_->comm, state_->stream));
    finish(t)->wait();
  }

  Tensor all_gather(const Tensor& t) override {
    check(t, "all_gather");
    gpu::DeviceGuard guard(state_->device);
    Shape shape = t.shape();
    shape.insert(shape.begin(), size_);
    Tensor out = empty(shape, {.dtype = t.dtype(), .device = state_->device});
    enter_stream();
    MT_NCCL_CHECK(ncclAllGather(t.data_ptr(), out.data_ptr(), t.nbytes(), ncclUint8, state_->comm, state_->stream));
    finish(out)->wait();
    return out;
  }

  void barrier() override {
    state_->check_usable("barrier");
    gpu::DeviceGuard guard(state_->device);
    Tensor token = zeros({1}, {.dtype = DType::kF32, .device = state_->device});
    enter_stream();
    MT_NCCL_CHECK(
        ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum, state_->comm, state_->stream));
    cudaEvent_t done = record();
    try {
      state_->host_wait(done, "barrier");
    } catch (...) {
      (void)cudaEventDestroy(done);
      throw;
    }
    (void)cudaEventDestroy(done);
  }

 private:
  void check(const Tensor& t, std::string_view op) const {
    state_->check_usable(op);
    MT_CHECK(t.defined(), op, ": the tensor is undefined. HINT: pass a tensor allocated on every rank");
    MT_CHECK(t.device() == state_->device, op, ": expected a tensor on ", state_->device.str(), ", got one on ",
             t.device().str(), " ", shape_str(t.shape()), " ", dtype_name(t.dtype()),
             ". HINT: the NCCL group works on its own GPU's tensors; CPU tensors use the MPI group");
    MT_CHECK(t.is_contiguous(), op, ": expected a contiguous tensor, got ", shape_str(t.shape()), " with strides ",
             shape_str(t.strides()), ". HINT: call .contiguous() and copy the result back");
  }

  // Orders the group's stream after everything queued so far on the caller's current stream.
  void enter_stream() {
    cudaEvent_t ready;
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    MT_CUDA_CHECK(cudaEventRecord(ready, gpu::current_stream(state_->device)));
    MT_CUDA_CHECK(cudaStreamWaitEvent(state_->stream, ready, 0));
    MT_CUDA_CHECK(cudaEventDestroy(ready));  // destruction is deferred until the event has completed
  }

  cudaEvent_t record() {
    cudaEvent_t done;
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    MT_CUDA_CHECK(cudaEventRecord(done, state_->stream));
    return done;
  }

  std::unique_ptr<Work> finish(Tensor keep) { return std::make_unique<NcclWork>(state_, record(), std::move(keep)); }

  int rank_;
  int size_;
  int local_rank_;
  std::shared_ptr<NcclState> state_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_nccl_process_group(ProcessGroup& bootstrap, Device device,
                                                      ProcessGroupOptions options) {
  MT_CHECK(device.is_cuda() && device.index < cuda_device_count(), "make_nccl_process_group: ", device.str(),
           " is not a usable GPU (", cuda_device_count(), " present",
           cuda_device_count() == 0 ? ": " + cuda_unavailable_reason() : std::string(),
           "). HINT: one process per GPU: pass cuda(local_rank)");
  return std::make_unique<NcclProcessGroup>(bootstrap, device, options);
}

#endif  // MANTISSA_WITH_CUDA

}  // namespace mantissa

// NCCL ProcessGroup: a communicator per group, a side stream for its collectives, events to order them
// against the caller's current stream, and a watchdog (nccl_watchdog.h) that aborts the communicator when
// a collective outlives the timeout or NCCL reports an error. CUDA builds only; a build without CUDA
// refuses with framework/dist/cuda/absent/nccl_process_group.cc.
#include "framework/dist/nccl_process_group.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cuda_runtime_api.h>
#include <functional>
#include <nccl.h>
#include <string>
#include <thread>
#include <vector>

#include "framework/cuda/caching_allocator.h"
#include "framework/cuda/check.h"
#include "framework/cuda/device.h"
#include "framework/cuda/stream.h"
#include "framework/dist/nccl_watchdog.h"
#include "framework/error.h"

namespace mantissa {

#define MT_NCCL_CHECK(expr)                                                                                           \
  do {                                                                                                                \
    const ncclResult_t mt_nccl_res_ = (expr);                                                                         \
    if (mt_nccl_res_ != ncclSuccess) [[unlikely]] {                                                                   \
      MT_THROW("NCCL error: ", #expr, " failed: ", ncclGetErrorString(mt_nccl_res_), " (", ncclGetLastError(nullptr), \
               ")");                                                                                                  \
    }                                                                                                                 \
  } while (0)

namespace {

ncclDataType_t nccl_dtype(DType d, std::string_view op) {
  switch (d) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI64: return ncclInt64;
    case DType::kI32: return ncclInt32;
    case DType::kBool: return ncclUint8;
    case DType::kU8: return ncclUint8;
    case DType::kF8E4M3:
    case DType::kF8E5M2: break;  // no reductions in FP8: gradients are reduced in their working dtype
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

// The watchdog's CUDA and NCCL calls. abort() frees the communicator; the state then never destroys it.
class NcclBackend final : public dist_detail::NcclWatchdogBackend {
 public:
  ncclComm_t comm = nullptr;
  int device = 0;

  EventState query_event(EventId event, std::string& error) override {
    const cudaError_t q = cudaEventQuery(as_event(event));
    if (q == cudaSuccess) return EventState::kDone;
    if (q == cudaErrorNotReady) return EventState::kPending;
    error = detail::cat("cudaEventQuery: ", cudaGetErrorName(q), ": ", cudaGetErrorString(q));
    return EventState::kFailed;
  }
  void destroy_event(EventId event) override { (void)cudaEventDestroy(as_event(event)); }
  std::string async_error() override {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t res = ncclCommGetAsyncError(comm, &async);
    if (res != ncclSuccess) return detail::cat("ncclCommGetAsyncError failed: ", ncclGetErrorString(res));
    if (async == ncclSuccess || async == ncclInProgress) return {};
    return detail::cat(ncclGetErrorString(async), ": ", ncclGetLastError(comm));
  }
  void abort() override {
    (void)ncclCommAbort(comm);
    comm = nullptr;
  }
  TimePoint now() override { return std::chrono::steady_clock::now(); }
  void sleep_for(std::chrono::microseconds d) override { std::this_thread::sleep_for(d); }
  void enter_thread() override { (void)cudaSetDevice(device); }

  static cudaEvent_t as_event(EventId id) { return reinterpret_cast<cudaEvent_t>(static_cast<uintptr_t>(id)); }
  static EventId as_id(cudaEvent_t event) { return static_cast<EventId>(reinterpret_cast<uintptr_t>(event)); }
};

// What the group and its works share: the communicator, its stream and the watchdog that polls every
// collective launched on them (nccl_watchdog.h).
struct NcclState {
  NcclBackend backend;
  cudaStream_t stream = nullptr;
  Device device;
  std::unique_ptr<dist_detail::NcclWatchdog> watchdog;
  // Tensors of collectives that never completed: an aborted kernel may still touch them until it has
  // returned, so their memory is not handed out again while the group lives.
  std::vector<Tensor> abandoned;

  ~NcclState() {
    // ncclCommDestroy would block on collectives still in flight: they get the timeout first, and a
    // communicator that did not finish them is aborted instead.
    const bool clean = watchdog == nullptr || watchdog->drain();
    watchdog.reset();
    if (backend.comm != nullptr) (void)(clean ? ncclCommDestroy(backend.comm) : ncclCommAbort(backend.comm));
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }
};

// An event recorded on the group's stream after a collective, plus what must stay alive until it runs:
// the tensor (and, for 16-bit all-reduces, the f32 staging copy and the copy back into the tensor).
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, cudaEvent_t done, Tensor keep, uint64_t seq, std::string_view op)
      : state_(std::move(state)), done_(done), keep_(std::move(keep)), seq_(seq), op_(op) {}
  ~NcclWork() override {
    try {
      state_->watchdog->check(seq_, op_);  // throws when the group was aborted under this collective
      if (!waited_) wait();
    } catch (const std::exception&) {
      state_->abandoned.push_back(std::move(keep_));
    }
    (void)cudaEventDestroy(done_);
  }

  // Never blocks the host: a collective that stops progressing is the watchdog's to abort, and this
  // throws its reason once it has.
  void wait() override {
    waited_ = true;
    state_->watchdog->check(seq_, op_);
    MT_CUDA_CHECK(cudaStreamWaitEvent(gpu::current_stream(state_->device), done_, 0));
  }
  bool is_completed() override {
    state_->watchdog->check(seq_, op_);
    const cudaError_t q = cudaEventQuery(done_);
    if (q == cudaErrorNotReady) return false;
    MT_CUDA_CHECK(q);
    return true;
  }

 private:
  std::shared_ptr<NcclState> state_;
  cudaEvent_t done_;
  Tensor keep_;
  uint64_t seq_;
  std::string_view op_;  // a literal
  bool waited_ = false;
};

std::string describe(const Tensor& t) {
  return detail::cat(dtype_name(t.dtype()), " ", shape_str(t.shape()), ", ", gpu::format_bytes(t.nbytes()));
}

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(ProcessGroup& bootstrap, Device device, ProcessGroupOptions options)
      : rank_(bootstrap.rank()),
        size_(bootstrap.size()),
        local_rank_(bootstrap.local_rank()),
        state_(std::make_shared<NcclState>()) {
    state_->device = device;
    state_->backend.device = device.index;
    gpu::DeviceGuard guard(device);
    // Rank 0 creates the id; the bootstrap group (CPU) carries its bytes to the others.
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) MT_NCCL_CHECK(ncclGetUniqueId(&id));
    Tensor bytes = empty({static_cast<int64_t>(sizeof(id))}, {.dtype = DType::kBool});
    std::memcpy(bytes.data_ptr(), &id, sizeof(id));
    bootstrap.broadcast(bytes, 0);
    std::memcpy(&id, bytes.data_ptr(), sizeof(id));
    MT_NCCL_CHECK(ncclCommInitRank(&state_->backend.comm, size_, id, rank_));
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking));
    // The thread polls a tenth of the timeout apart (1 to 100 ms, PyTorch's pace at most): a timeout of
    // 10 ms or more fires at most a tenth late, and the default costs ten cheap polls a second while
    // collectives are in flight (none while nothing is).
    const auto interval = std::clamp<std::chrono::microseconds>(options.timeout / 10, std::chrono::milliseconds(1),
                                                                std::chrono::milliseconds(100));
    state_->watchdog = std::make_unique<dist_detail::NcclWatchdog>(
        &state_->backend, dist_detail::NcclWatchdogOptions{
                              .timeout = options.timeout,
                              .thread_interval = interval,
                              .rank = rank_,
                              .size = size_,
                              .device = device.str(),
                              // The caller may be blocked in a host read that the abort releases; the
                              // error is thrown at its next call on the group, and printed now.
                              .on_abort = [](const std::string& reason) {
                                std::fprintf(stderr, "mantissa: the NCCL watchdog aborted the communicator: %s\n",
                                             reason.c_str());
                              }});
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
    const uint64_t seq = launch("all_reduce", detail::cat(reduce_op_name(op), " of ", describe(t)), [&] {
      MT_NCCL_CHECK(ncclAllReduce(work_tensor.data_ptr(), work_tensor.data_ptr(), static_cast<size_t>(t.numel()),
                                  nccl_dtype(work_tensor.dtype(), "all_reduce"), nccl_op(op), state_->backend.comm,
                                  state_->stream));
    });
    if (narrow) {
      gpu::StreamGuard on_group_stream(state_->device.index, state_->stream);
      copy_(t, work_tensor);  // runs on the group's stream, after the reduction
    }
    return finish(narrow ? work_tensor : t, seq, "all_reduce");
  }

  void broadcast(const Tensor& t, int root) override {
    check(t, "broadcast");
    MT_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of this group of ", size_);
    gpu::DeviceGuard guard(state_->device);
    const uint64_t seq = launch("broadcast", detail::cat(describe(t), " from rank ", root), [&] {
      MT_NCCL_CHECK(
          ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, state_->backend.comm, state_->stream));
    });
    finish(t, seq, "broadcast")->wait();
  }

  Tensor all_gather(const Tensor& t) override {
    check(t, "all_gather");
    gpu::DeviceGuard guard(state_->device);
    Shape shape = t.shape();
    shape.insert(shape.begin(), size_);
    Tensor out = empty(shape, {.dtype = t.dtype(), .device = state_->device});
    const uint64_t seq = launch("all_gather", detail::cat(describe(t), " from each of ", size_, " ranks"), [&] {
      MT_NCCL_CHECK(
          ncclAllGather(t.data_ptr(), out.data_ptr(), t.nbytes(), ncclUint8, state_->backend.comm, state_->stream));
    });
    finish(out, seq, "all_gather")->wait();
    return out;
  }

  // The one call here that blocks the host: it waits through the watchdog, so the timeout (counted for
  // each collective still ahead of it) and NCCL's asynchronous errors end it.
  void barrier() override {
    state_->watchdog->check_usable("barrier");
    gpu::DeviceGuard guard(state_->device);
    Tensor token = zeros({1}, {.dtype = DType::kF32, .device = state_->device});
    const uint64_t seq = launch("barrier", "an all-reduce of f32 [1], 4 B", [&] {
      MT_NCCL_CHECK(ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum, state_->backend.comm,
                                  state_->stream));
    });
    try {
      state_->watchdog->wait(seq, "barrier");
    } catch (...) {
      state_->abandoned.push_back(std::move(token));
      throw;
    }
  }

 private:
  void check(const Tensor& t, std::string_view op) const {
    state_->watchdog->check_usable(op);
    MT_CHECK(t.defined(), op, ": the tensor is undefined. HINT: pass a tensor allocated on every rank");
    MT_CHECK(t.device() == state_->device, op, ": expected a tensor on ", state_->device.str(), ", got one on ",
             t.device().str(), " ", shape_str(t.shape()), " ", dtype_name(t.dtype()),
             ". HINT: the NCCL group works on its own GPU's tensors; CPU tensors use the MPI group");
    MT_CHECK(t.is_contiguous(), op, ": expected a contiguous tensor, got ", shape_str(t.shape()), " with strides ",
             shape_str(t.strides()), ". HINT: call .contiguous() and copy the result back");
  }

  // Orders the group's stream after the caller's current stream, then launches the collective through
  // the watchdog, which refuses it once the group is broken and otherwise tracks it by an event recorded
  // right after it. `call` makes the one NCCL call, under the watchdog's lock (NCCL wants one thread at a
  // time on a communicator, and the watchdog's thread may abort it).
  uint64_t launch(std::string_view op, std::string what, const std::function<void()>& call) {
    enter_stream();
    return state_->watchdog->launch(op, std::move(what), [&] {
      call();
      return NcclBackend::as_id(record());
    });
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
    const cudaError_t recorded = cudaEventRecord(done, state_->stream);
    if (recorded != cudaSuccess) (void)cudaEventDestroy(done);
    MT_CUDA_CHECK(recorded);
    return done;
  }

  std::unique_ptr<Work> finish(Tensor keep, uint64_t seq, std::string_view op) {
    return std::make_unique<NcclWork>(state_, record(), std::move(keep), seq, op);
  }

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

}  // namespace mantissa

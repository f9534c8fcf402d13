// MpiProcessGroup: ProcessGroup over MPI for CPU tensors. Every collective is MPI's nonblocking form
// (MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather, MPI_Ibarrier) completed by a loop of MPI_Test with a
// deadline, so no call can block forever, that sleeps once the wait is long, so a waiting rank does not
// spin a core; 16-bit all-reduces go through an f32 staging buffer.
#include "framework/dist/mpi_process_group.h"

#if MANTISSA_WITH_MPI
#include <algorithm>
#include <any>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <mpi.h>
#include <stdlib.h>  // on_exit (glibc): unlike atexit, it is told the exit status
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "framework/convert.h"
#include "framework/error.h"
#include "framework/profiler/profiler.h"

namespace mantissa {
namespace {

using Clock = std::chrono::steady_clock;

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

void mpi_check(int code, std::string_view op, std::string_view call) {
  MT_CHECK(code == MPI_SUCCESS, op, ": ", call, " failed: ", mpi_error_string(code));
}

// Runs at exit when mantissa initialized MPI. Status 0 finalizes. Any other status aborts the job: the
// other ranks may be waiting in a collective for this one, and MPI_Finalize would wait for them in turn,
// so the job would hang instead of failing. mpirun then reports the status and ends every rank.
void finish_mpi_at_exit(int status, void*) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (status != 0) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr,
                 "mantissa: rank %d exits with status %d; aborting the MPI job so that the other ranks "
                 "do not wait for it\n",
                 rank, status);
    MPI_Abort(MPI_COMM_WORLD, status);
  }
  MPI_Finalize();
}

// Set when ensure_mpi_initialized initialized MPI (and registered finish_mpi_at_exit).
std::atomic<bool> g_mpi_is_ours{false};

// The thread support MPI runs with, initializing MPI (MPI_THREAD_FUNNELED) on the first call if needed.
int ensure_mpi_initialized() {
  static const int provided = [] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    MT_CHECK(!finalized,
             "init_process_group: MPI was already finalized. HINT: create the process group before "
             "MPI_Finalize, or let mantissa initialize and finalize MPI");
    int initialized = 0;
    MPI_Initialized(&initialized);
    int level = MPI_THREAD_SINGLE;
    if (initialized) {
      MPI_Query_thread(&level);
    } else {
      mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &level), "init_process_group",
                "MPI_Init_thread");
      on_exit(finish_mpi_at_exit, nullptr);
      g_mpi_is_ours = true;
      // Open MPI 4 reports errors of nonblocking collectives (found in MPI_Test) to MPI_COMM_WORLD's handler,
      // not to the group's communicator; mantissa owns MPI here, so those come back as codes too.
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    }
    MT_CHECK(level >= MPI_THREAD_FUNNELED, "init_process_group: MPI runs with thread level ", level,
             ", below MPI_THREAD_FUNNELED. HINT: initialize MPI with MPI_Init_thread(MPI_THREAD_FUNNELED)");
    return level;
  }();
  return provided;
}

// What the group and its works in flight share. `broken` is set by a timeout: the communicator then has
// requests that will never complete, so every later call throws and nothing waits on them again.
struct GroupState {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};
  std::string broken;
  // Like mpi_check, but an MPI error inside a collective leaves the communicator unusable: break the group.
  void check(int code, const std::string& what, std::string_view call) {
    if (code == MPI_SUCCESS) [[likely]]
      return;
    broken = detail::cat(what, ": ", call, " failed: ", mpi_error_string(code));
    MT_THROW(broken,
             ". HINT: the ranks called collectives in different orders or with different sizes? "
             "ProcessGroupOptions{.check = CollectiveCheck::kShapes} (mantissa-train --collective_check=shapes) "
             "names the difference");
  }
  // f32 buffers of finished 16-bit all-reduces, kept for the next ones: a fresh 50 MB buffer costs its
  // page faults on every call (the f16 25 MB all-reduce on 2 ranks took 160 ms instead of 110). Holds as
  // many buffers as were ever in flight at once.
  std::vector<std::vector<float>> spare_staging;
  std::vector<float> take_staging(int count) {
    std::vector<float> buffer;
    for (size_t i = 0; i < spare_staging.size(); ++i) {
      if (spare_staging[i].size() >= static_cast<size_t>(count) || i + 1 == spare_staging.size()) {
        buffer = std::move(spare_staging[i]);
        spare_staging.erase(spare_staging.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
    if (buffer.size() < static_cast<size_t>(count)) buffer.resize(static_cast<size_t>(count));
    return buffer;
  }
  ~GroupState() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized && broken.empty()) MPI_Comm_free(&comm);
  }
};

// How wait_request polls. A blocking MPI_Wait, like a bare MPI_Test loop, keeps a core at 100% for as long
// as a peer takes (Open MPI's progress loop): at the default 30-minute timeout a dead peer cost 30 CPU-minutes
// per waiting rank. So the loop spins (tests and yields) only for kSpin, then sleeps between tests: an eighth
// of the time waited since the spin, at least kMinSleep, at most kMaxSleep. A test is what moves Open MPI's
// nonblocking collectives on (a round of the algorithm, a fragment of a message), and a sleeping rank must
// be scheduled again, so a sleep can delay the collective by its length or more: kSpin is long enough that
// a step's waits for its all-reduces stay in the spin, and a long wait (a dead or stopped peer, rank 0
// writing a checkpoint) then costs one test a millisecond. The step time and the CPU time of a rank waiting
// for a stopped peer, before and after: bench/RESULTS.md.
constexpr std::chrono::microseconds kSpin{20000}, kMinSleep{10}, kMaxSleep{1000};

// Polls `request` until it completes; after state.timeout the group is broken and this throws.
void wait_request(GroupState& state, MPI_Request& request, const std::string& what) {
  MT_CHECK(state.broken.empty(), what, ": the process group is broken since ", state.broken,
           ". HINT: end the job; the collectives in flight will not complete");
  const Clock::time_point start = Clock::now();
  for (;;) {
    int done = 0;
    state.check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what, "MPI_Test");
    if (done) return;
    const Clock::duration waited = Clock::now() - start;
    if (waited > state.timeout) {
      state.broken = detail::cat(what, ": rank ", state.rank, " of ", state.size, " waited ", state.timeout.count(),
                                 " ms and the other ranks did not join (timed out)");
      MT_THROW(state.broken,
               ". A rank may have died or hung, or the ranks called collectives in different "
               "orders. HINT: ProcessGroupOptions{.check = CollectiveCheck::kShapes} (mantissa-train "
               "--collective_check=shapes) finds a mismatch; "
               "raise .timeout if a rank is legitimately slow");
    }
    if (waited < kSpin) {
      std::this_thread::yield();  // ranks may share cores (mpirun --oversubscribe)
    } else {
      std::this_thread::sleep_for(std::clamp<Clock::duration>((waited - kSpin) / 8, kMinSleep, kMaxSleep));
    }
  }
}

std::string describe(std::string_view op, const Tensor& t) {
  return detail::cat(op, " of ", shape_str(t.shape()), " ", dtype_name(t.dtype()));
}

int checked_count(int64_t count, std::string_view what, std::string_view unit) {
  MT_CHECK(count <= INT_MAX, what, ": ", count, " ", unit,
           " are more than one MPI call takes (2^31 - 1). "
           "HINT: split the tensor (DDP's buckets are about 25 MB)");
  return static_cast<int>(count);
}

// What MPI's collectives in flight share: the request, its test and its wait (with the group's timeout), and
// what becomes of one destroyed before wait(). A derived work starts its collective in its constructor, says
// in complete() what follows its completion, and calls settle() first thing in its destructor, handing it
// the buffers MPI may still write into.
class MpiRequestWork : public Work {
 public:
  bool is_completed() final {
    if (done_) return true;
    int flag = 0;
    state_->check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), what_, "MPI_Test");
    if (flag) finish();
    return done_;
  }

  void wait() final {
    if (done_) return;
    profiler::RecordScope scope(wait_event_, profiler::Category::kCommunication);
    wait_request(*state_, request_, what_);
    finish();
  }

 protected:
  MpiRequestWork(std::shared_ptr<GroupState> state, std::string what, const char* wait_event)
      : state_(std::move(state)), what_(std::move(what)), wait_event_(wait_event) {}

  // Waits for a request still in flight (errors are printed: a destructor cannot throw). On a broken group
  // the request never completes and MPI may still write into `keep`: they are kept allocated for good.
  template <typename... Keep>
  void settle(Keep&&... keep) noexcept {
    if (done_) return;
    if (!state_->broken.empty()) {
      static auto* abandoned = new std::vector<std::any>();
      (abandoned->emplace_back(std::forward<Keep>(keep)), ...);
      return;
    }
    try {
      wait();
    } catch (const Error& e) {
      std::fprintf(stderr, "mantissa: a Work destroyed before wait(): %s\n", e.what());
    }
  }

  virtual void complete() = 0;

  std::shared_ptr<GroupState> state_;
  std::string what_;
  MPI_Request request_ = MPI_REQUEST_NULL;

 private:
  void finish() {
    done_ = true;
    complete();
  }

  const char* wait_event_;
  bool done_ = false;
};

// An all-reduce in flight. 16-bit tensors are widened into `staging_` (f32, at least numel long) before
// the reduction and rounded back once in complete(); kAvg divides the sum by the world size there too.
class MpiAllReduceWork final : public MpiRequestWork {
 public:
  MpiAllReduceWork(std::shared_ptr<GroupState> state, const Tensor& t, ReduceOp op, std::string what)
      : MpiRequestWork(std::move(state), std::move(what), "all_reduce.wait"), tensor_(t), op_(op) {
    profiler::RecordScope scope("all_reduce", profiler::Category::kCommunication);
    if (scope.active()) scope.add_input(t);
    const int count = checked_count(t.numel(), what_, "elements");
    void* buffer = t.data_ptr();
    MPI_Datatype type = MPI_FLOAT;
    switch (t.dtype()) {
      case DType::kF32: break;
      case DType::kF64: type = MPI_DOUBLE; break;
      case DType::kI64: type = MPI_INT64_T; break;
      case DType::kF16:
        staging_ = state_->take_staging(count);
        convert(t.data<Half>(), staging_.data(), count);
        buffer = staging_.data();
        break;
      case DType::kBF16:
        staging_ = state_->take_staging(count);
        convert(t.data<BFloat16>(), staging_.data(), count);
        buffer = staging_.data();
        break;
      default: MT_ASSERT(false, "check_reducible lets ", dtype_name(t.dtype()), " through");
    }
    const MPI_Op mpi_op = op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
    state_->check(MPI_Iallreduce(MPI_IN_PLACE, buffer, count, type, mpi_op, state_->comm, &request_), what_,
                  "MPI_Iallreduce");
  }

  ~MpiAllReduceWork() override { settle(std::move(tensor_), std::move(staging_)); }

 private:
  void complete() override {
    const int64_t n = tensor_.numel();
    const bool avg = op_ == ReduceOp::kAvg;
    if (is_low_precision(tensor_.dtype())) {
      if (avg) {
        const float size = static_cast<float>(state_->size);
        for (int64_t i = 0; i < n; ++i) staging_[i] /= size;
      }
      if (tensor_.dtype() == DType::kF16)
        convert(staging_.data(), tensor_.data<Half>(), n);
      else
        convert(staging_.data(), tensor_.data<BFloat16>(), n);
      state_->spare_staging.push_back(std::move(staging_));
    } else if (avg && tensor_.dtype() == DType::kF32) {
      float* x = tensor_.data<float>();
      const float size = static_cast<float>(state_->size);
      for (int64_t i = 0; i < n; ++i) x[i] /= size;
    } else if (avg) {
      double* x = tensor_.data<double>();
      const double size = static_cast<double>(state_->size);
      for (int64_t i = 0; i < n; ++i) x[i] /= size;
    }
  }

  Tensor tensor_;
  ReduceOp op_;
  std::vector<float> staging_;
};

// The MPI counts and displacements of `counts` (each checked to fit an int), and this rank's offset.
struct MpiRegions {
  std::vector<int> counts, displs;
};
MpiRegions mpi_regions(std::span<const int64_t> counts, const std::string& what) {
  MpiRegions r;
  int64_t offset = 0;
  for (const int64_t c : counts) {
    r.counts.push_back(checked_count(c, what, "elements"));
    r.displs.push_back(checked_count(offset, what, "elements of offset"));
    offset += c;
  }
  return r;
}

// A reduce-scatter in flight (MPI_Ireduce_scatter in place): MPI leaves this rank's result at the start of
// the buffer; complete() moves it to the rank's region. The counts live here until the request completes.
class MpiReduceScatterWork final : public MpiRequestWork {
 public:
  MpiReduceScatterWork(std::shared_ptr<GroupState> state, const Tensor& t, std::span<const int64_t> counts, ReduceOp op,
                       std::string what)
      : MpiRequestWork(std::move(state), std::move(what), "reduce_scatter.wait"),
        tensor_(t),
        regions_(mpi_regions(counts, what_)) {
    profiler::RecordScope scope("reduce_scatter", profiler::Category::kCommunication);
    if (scope.active()) scope.add_input(t);
    const MPI_Datatype type = t.dtype() == DType::kF64 ? MPI_DOUBLE : MPI_FLOAT;
    state_->check(MPI_Ireduce_scatter(MPI_IN_PLACE, t.data_ptr(), regions_.counts.data(), type,
                                      op == ReduceOp::kMax ? MPI_MAX : MPI_SUM, state_->comm, &request_),
                  what_, "MPI_Ireduce_scatter");
  }
  ~MpiReduceScatterWork() override { settle(std::move(tensor_), std::move(regions_)); }

 private:
  void complete() override {
    const auto r = static_cast<size_t>(state_->rank);
    const size_t bytes = element_size(tensor_.dtype());
    auto* base = static_cast<char*>(tensor_.data_ptr());
    std::memmove(base + regions_.displs[r] * bytes, base, static_cast<size_t>(regions_.counts[r]) * bytes);
  }

  Tensor tensor_;
  MpiRegions regions_;
};

// What the ranks compare in CollectiveCheck::kShapes: collective, argument (op or root), dtype, rank of the
// shape, numel and the first kMetaDims sizes (-1 past the end).
enum class Collective : int64_t { kAllReduce, kBroadcast, kAllGather, kBarrier, kReduceScatter, kAllGatherRegions };
constexpr int kMetaDims = 6;
using Meta = std::array<int64_t, 5 + kMetaDims>;

std::string describe_meta(const Meta& m) {
  std::string call;
  switch (static_cast<Collective>(m[0])) {
    case Collective::kAllReduce:
      call = detail::cat("all_reduce(", reduce_op_name(static_cast<ReduceOp>(m[1])), ")");
      break;
    case Collective::kBroadcast: call = detail::cat("broadcast(root ", m[1], ")"); break;
    case Collective::kAllGather: call = "all_gather"; break;
    case Collective::kBarrier: return "barrier";
    case Collective::kReduceScatter:
      call = detail::cat("reduce_scatter(", reduce_op_name(static_cast<ReduceOp>(m[1])), ")");
      break;
    case Collective::kAllGatherRegions: call = "all_gather_regions"; break;
  }
  Shape shape;
  for (int64_t d = 0; d < std::min<int64_t>(m[3], kMetaDims); ++d) shape.push_back(m[5 + d]);
  return detail::cat(call, " of ", shape_str(shape), m[3] > kMetaDims ? "(...)" : "", " ",
                     dtype_name(static_cast<DType>(m[2])));
}

class MpiProcessGroup final : public ProcessGroup {
 public:
  explicit MpiProcessGroup(ProcessGroupOptions options) : options_(options) {
    thread_level_ = ensure_mpi_initialized();
    state_ = std::make_shared<GroupState>();
    state_->timeout = options.timeout;
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &state_->comm), "init_process_group", "MPI_Comm_dup");
    // Errors come back as codes (turned into mantissa::Error) instead of aborting the job.
    mpi_check(MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN), "init_process_group",
              "MPI_Comm_set_errhandler");
    MPI_Comm_rank(state_->comm, &state_->rank);
    MPI_Comm_size(state_->comm, &state_->size);
    if (const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {
      local_rank_ = std::atoi(env);
    } else {
      MPI_Comm local = MPI_COMM_NULL;
      mpi_check(MPI_Comm_split_type(state_->comm, MPI_COMM_TYPE_SHARED, state_->rank, MPI_INFO_NULL, &local),
                "init_process_group", "MPI_Comm_split_type");
      MPI_Comm_rank(local, &local_rank_);
      MPI_Comm_free(&local);
    }
  }

  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  int local_rank() const override { return local_rank_; }
  std::string_view backend() const override { return "mpi"; }

  std::unique_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    dist_detail::check_reducible(t, op, "all_reduce");
    const std::string what = describe(detail::cat("all_reduce(", reduce_op_name(op), ")"), t);
    check_usable(what);
    check_agreement(Collective::kAllReduce, static_cast<int64_t>(op), t, what);
    return std::make_unique<MpiAllReduceWork>(state_, t, op, what);
  }

  void broadcast(const Tensor& t, int root) override {
    dist_detail::check_tensor(t, "broadcast");
    MT_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of a world of ", size(),
             ". HINT: root must be in [0, size())");
    const std::string what = describe(detail::cat("broadcast(root ", root, ")"), t);
    check_usable(what);
    check_agreement(Collective::kBroadcast, root, t, what);
    MPI_Request request = MPI_REQUEST_NULL;
    state_->check(MPI_Ibcast(t.data_ptr(), checked_count(static_cast<int64_t>(t.nbytes()), what, "bytes"), MPI_BYTE,
                             root, state_->comm, &request),
                  what, "MPI_Ibcast");
    wait_request(*state_, request, what);
  }

  Tensor all_gather(const Tensor& t) override {
    dist_detail::check_tensor(t, "all_gather");
    const std::string what = describe("all_gather", t);
    check_usable(what);
    check_agreement(Collective::kAllGather, 0, t, what);
    Shape shape = t.shape();
    shape.insert(shape.begin(), size());
    Tensor out = empty(shape, {.dtype = t.dtype()});
    const int bytes = checked_count(static_cast<int64_t>(out.nbytes()), what, "bytes of output") / size();
    MPI_Request request = MPI_REQUEST_NULL;
    state_->check(
        MPI_Iallgather(t.data_ptr(), bytes, MPI_BYTE, out.data_ptr(), bytes, MPI_BYTE, state_->comm, &request), what,
        "MPI_Iallgather");
    wait_request(*state_, request, what);
    return out;
  }

  std::unique_ptr<Work> reduce_scatter_async(const Tensor& t, std::span<const int64_t> counts, ReduceOp op) override {
    dist_detail::check_regions(t, counts, size(), "reduce_scatter");
    MT_CHECK(op != ReduceOp::kAvg, "reduce_scatter: kAvg is not offered (DDP divides before the sum)");
    const std::string what = describe(detail::cat("reduce_scatter(", reduce_op_name(op), ")"), t);
    check_usable(what);
    check_agreement(Collective::kReduceScatter, static_cast<int64_t>(op), t, what);
    return std::make_unique<MpiReduceScatterWork>(state_, t, counts, op, what);
  }

  void all_gather_regions(const Tensor& t, std::span<const int64_t> counts) override {
    dist_detail::check_regions(t, counts, size(), "all_gather_regions");
    const std::string what = describe("all_gather_regions", t);
    check_usable(what);
    check_agreement(Collective::kAllGatherRegions, 0, t, what);
    profiler::RecordScope scope("all_gather_regions", profiler::Category::kCommunication);
    if (scope.active()) scope.add_input(t);
    const MpiRegions regions = mpi_regions(counts, what);
    MPI_Request request = MPI_REQUEST_NULL;
    state_->check(
        MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t.data_ptr(), regions.counts.data(), regions.displs.data(),
                        t.dtype() == DType::kF64 ? MPI_DOUBLE : MPI_FLOAT, state_->comm, &request),
        what, "MPI_Iallgatherv");
    wait_request(*state_, request, what);
  }

  void barrier() override {
    check_usable("barrier");
    check_agreement(Collective::kBarrier, 0, Tensor(), "barrier");
    MPI_Request request = MPI_REQUEST_NULL;
    state_->check(MPI_Ibarrier(state_->comm, &request), "barrier", "MPI_Ibarrier");
    wait_request(*state_, request, "barrier");
  }

 private:
  void check_usable(const std::string& what) const {
    MT_CHECK(state_->broken.empty(), what, ": the process group is broken since ", state_->broken,
             ". HINT: end the job; a new group cannot recover the ranks' state either");
    if (thread_level_ < MPI_THREAD_MULTIPLE) {
      int is_main = 0;
      MPI_Is_thread_main(&is_main);
      MT_CHECK(is_main, what,
               ": called from a thread other than the one that initialized MPI "
               "(MPI_THREAD_FUNNELED). HINT: call collectives from the main thread");
    }
  }

  // CollectiveCheck::kShapes: all ranks exchange what they are about to do; all throw the same message
  // when any two differ, so none is left waiting.
  void check_agreement(Collective collective, int64_t arg, const Tensor& t, const std::string& what) {
    if (options_.check == CollectiveCheck::kOff) return;
    Meta mine;
    mine.fill(-1);
    mine[0] = static_cast<int64_t>(collective);
    mine[1] = arg;
    if (t.defined()) {
      mine[2] = static_cast<int64_t>(t.dtype());
      mine[3] = t.dim();
      mine[4] = t.numel();
      for (int64_t d = 0; d < std::min<int64_t>(t.dim(), kMetaDims); ++d) mine[5 + d] = t.size(d);
    }
    std::vector<Meta> all(static_cast<size_t>(size()));
    MPI_Request request = MPI_REQUEST_NULL;
    state_->check(MPI_Iallgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                                 static_cast<int>(mine.size()), MPI_INT64_T, state_->comm, &request),
                  what, "MPI_Iallgather (CollectiveCheck)");
    wait_request(*state_, request, what + " (CollectiveCheck)");
    for (int r = 1; r < size(); ++r) {
      MT_CHECK(all[r] == all[0], what, ": the ranks disagree (CollectiveCheck::kShapes): rank 0 of ", size(),
               " called ", describe_meta(all[0]), ", rank ", r, " called ", describe_meta(all[r]),
               ". HINT: every rank must call the same collectives in the same order, with tensors of the "
               "same shape and dtype");
    }
  }

  ProcessGroupOptions options_;
  std::shared_ptr<GroupState> state_;
  int thread_level_ = MPI_THREAD_SINGLE;
  int local_rank_ = 0;
};

}  // namespace

void finalize_mpi_if_ours() {
  if (!g_mpi_is_ours) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::unique_ptr<ProcessGroup> make_mpi_process_group(ProcessGroupOptions options) {
  return std::make_unique<MpiProcessGroup>(options);
}

}  // namespace mantissa
#endif  // MANTISSA_WITH_MPI

// The NCCL group's watchdog, apart from CUDA and NCCL: it tracks every collective in flight by the event
// recorded after it, polls those events and the communicator's asynchronous error against the group's
// timeout, aborts the communicator on a timeout or an error, and keeps the reason for every later call.
// The event, error and abort calls go through NcclWatchdogBackend, so tests drive it on the CPU.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace mantissa::dist_detail {

class NcclWatchdogBackend {
 public:
  using EventId = uint64_t;  // a cudaEvent_t as an integer
  using TimePoint = std::chrono::steady_clock::time_point;
  enum class EventState { kPending, kDone, kFailed };

  virtual ~NcclWatchdogBackend() = default;
  // cudaEventQuery; on kFailed `error` says why (a sticky CUDA error such as an illegal address).
  virtual EventState query_event(EventId event, std::string& error) = 0;
  virtual void destroy_event(EventId event) = 0;
  // ncclCommGetAsyncError: empty while the communicator has none, else NCCL's description.
  virtual std::string async_error() = 0;
  virtual void abort() = 0;  // ncclCommAbort: kernels waiting on a peer return, the communicator is gone
  virtual TimePoint now() = 0;
  // How a host wait pauses between polls; a fake clock advances here.
  virtual void sleep_for(std::chrono::microseconds d) = 0;
  // Called once on the watchdog thread before its first poll (the CUDA backend selects the group's GPU,
  // so the thread does not create a context on GPU 0).
  virtual void enter_thread() {}
};

enum class WatchdogThread { kRun, kNone };  // kNone: only poll() and the host waits check (tests)

struct NcclWatchdogOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  // How often the thread polls while collectives are in flight, and how long a host wait pauses.
  std::chrono::microseconds thread_interval{std::chrono::milliseconds(100)};
  std::chrono::microseconds host_interval{50};
  int rank = 0;
  int size = 1;
  std::string device = "cuda:0";
  WatchdogThread thread = WatchdogThread::kRun;
  // Told the reason once when the watchdog aborts the communicator (the group prints it: the thread
  // cannot throw into the caller, which may be blocked in a host read that the abort releases).
  std::function<void(const std::string&)> on_abort;
};

// Every collective's clock starts when it can start: when it was launched or, if later, when the one
// before it on the group's stream was seen to complete (collectives run in order there). A long queue of
// collectives launched at once therefore never times out while each finishes within the timeout; the
// one that stops progressing does, a poll interval late at most. Thread-safe; NCCL wants one thread at a
// time on a communicator, so launches, polls and the abort hold one lock.
class NcclWatchdog {
 public:
  using EventId = NcclWatchdogBackend::EventId;

  NcclWatchdog(NcclWatchdogBackend* backend, NcclWatchdogOptions options);
  ~NcclWatchdog();  // stops the thread; see drain() for what a group does before it destroys its communicator
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // Runs `enqueue` (which launches one collective and returns the event recorded after it) under the lock
  // and tracks the collective. `op` is its name ("all_reduce"), `what` its tensor ("sum of f32 [4, 4],
  // 64 B"). Throws the abort's reason at once, without calling `enqueue`, once the group is broken.
  // Returns the collective's sequence number (1, 2, ...: the same call has the same number on every rank).
  uint64_t launch(std::string_view op, std::string what, const std::function<EventId()>& enqueue);

  // One pass: retires the completed collectives in order, then aborts on an asynchronous error, a failed
  // event or a timed-out oldest collective. The thread calls it; tests call it directly.
  void poll();

  // Blocks the host until collective `seq` has completed, polling; throws when the group breaks first
  // (the timeout or an error of this or an earlier collective). `op` names the caller in the message.
  void wait(uint64_t seq, std::string_view op);

  // Throws the abort's reason when the group is broken and collective `seq` had not been seen to complete
  // (its result is not to be trusted); never blocks. True when it has been seen to complete.
  bool check(uint64_t seq, std::string_view op) const;
  void check_usable(std::string_view op) const;  // throws when the group is broken
  std::string broken() const;                    // the reason; empty while the group is usable
  size_t in_flight() const;

  // Before the communicator is destroyed: stops the thread and waits (with the timeout) for the
  // collectives in flight. True when they all completed and the communicator may be destroyed; false
  // when it was aborted (now or earlier), which also frees it. Never throws.
  bool drain();

 private:
  struct InFlight {
    uint64_t seq = 0;
    std::string op;
    std::string what;
    EventId event = 0;
    NcclWatchdogBackend::TimePoint launched;
  };

  void poll_locked();
  void break_locked(const InFlight& culprit, std::string_view failure);
  [[noreturn]] void throw_broken(std::string_view op) const;
  void thread_main();
  void stop_thread();

  NcclWatchdogBackend* backend_;
  NcclWatchdogOptions options_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<InFlight> in_flight_;
  uint64_t next_seq_ = 1;
  uint64_t done_through_ = 0;  // every collective up to this number has completed
  // When the oldest collective in flight could start: the moment its predecessor was seen to complete.
  NcclWatchdogBackend::TimePoint head_since_{};
  std::string broken_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mantissa::dist_detail

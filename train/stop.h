// Stopping a run cleanly: a request that any thread or a signal handler may make, and the signal handlers
// that make it. The Trainer reads the request at step boundaries (after a whole optimizer step, never
// between unscale_ and update), writes a checkpoint and returns; under data parallelism the ranks agree on
// it in the all-reduce each step already runs, so they all stop after the same step.
//
//   StopRequest stop;
//   StopOnSignals signals(stop);  // SIGTERM, SIGINT, SIGUSR1 now request a stop instead of killing
//   TrainerConfig config{..., .stop = &stop};
//   ... trainer.fit() returns a RunSummary with `stopped` set ...
#pragma once

#include <atomic>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

namespace mantissa {

// A request to stop, kept as the signal that asked for it (0: the program's own condition). Every member
// is one lock-free atomic operation: thread-safe and async-signal-safe.
class StopRequest {
 public:
  // The first request is kept; later ones change nothing. `signal` names the reason in reports.
  void request(int signal = 0) noexcept {
    int none = kNone;
    state_.compare_exchange_strong(none, signal < 0 ? 0 : signal);
  }
  bool requested() const noexcept { return state_.load() != kNone; }
  // The signal of the first request; 0 when it was no signal (or there was none).
  int signal() const noexcept { return requested() ? state_.load() : 0; }
  // Forgets the request (a program that goes on after a stop, e.g. to start another run).
  void clear() noexcept { state_.store(kNone); }

 private:
  static constexpr int kNone = -1;
  std::atomic<int> state_{kNone};
  static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");
};

// While it lives, each of `signals` sent to the process (kill, a scheduler, Ctrl-C) requests a stop on `stop`
// instead of running its previous action; a SIGINT that arrives when a stop is already requested ends the
// process at once, by SIGINT (Ctrl-C twice). The previous actions come back when it is destroyed. A signal
// that is ignored when it is made stays ignored (a background job of a shell script starts with SIGINT
// ignored; nohup ignores SIGHUP). One may live at a time in a process (a second throws mantissa::Error).
//
// Make it at the start of main, before the program starts threads (OpenMP, MPI, data loaders). It blocks
// the signals in the calling thread, so every thread started later inherits the block, and one thread of
// its own takes them with sigwait: no signal handler ever runs on a thread that is computing. That matters:
// oneDNN's x86 sgemm (2.6, Debian's) points the stack pointer into a heap buffer while it runs, and a
// handler that runs there writes its frame into the heap (uxlfoundation/oneDNN#4845). Threads that
// already exist get a handler that only sets the request, as a fallback. A signal raised in the calling
// thread itself (raise, pthread_kill) waits until the destructor, which takes it as a request.
class StopOnSignals {
 public:
  explicit StopOnSignals(StopRequest& stop, std::vector<int> signals = {SIGTERM, SIGINT, SIGUSR1});
  ~StopOnSignals();
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  std::vector<int> signals_;  // those handled: the ones asked for, less those ignored at the start
  std::vector<struct sigaction> previous_;
  sigset_t set_{};            // signals_ as a set
  sigset_t previous_mask_{};  // the calling thread's mask before
  std::atomic<bool> quitting_{false};
  std::thread waiter_;
};

// "SIGTERM", "SIGINT", "SIGUSR1", ... ("signal 42" for one without a name here); "" for 0.
std::string signal_name(int signal);

}  // namespace mantissa

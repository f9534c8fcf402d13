// StopOnSignals: a thread that takes the stop signals with sigwait (and, for threads that were there before,
// handlers that only touch lock-free atomics), and signal names.
#include "train/stop.h"

#include <ctime>
#include <pthread.h>

#include "absl/strings/str_cat.h"
#include "framework/error.h"

namespace mantissa {
namespace {

// The request the installed handlers and the waiting thread set; null while no StopOnSignals lives.
std::atomic<StopRequest*> g_target{nullptr};

// Ctrl-C twice: end now, by SIGINT, which a shell reports as 130. Every call here is async-signal-safe
// (pthread_sigmask is rt_sigprocmask on Linux). SIGINT is unblocked in this thread first: it is blocked in
// the waiting thread, and in a handler for SIGINT.
void end_by_sigint() {
  std::signal(SIGINT, SIG_DFL);
  sigset_t only_int;
  sigemptyset(&only_int);
  sigaddset(&only_int, SIGINT);
  pthread_sigmask(SIG_UNBLOCK, &only_int, nullptr);
  std::raise(SIGINT);  // the default action ends the process here
}

void on_stop_signal(int sig) {
  StopRequest* target = g_target.load();
  if (target == nullptr) return;
  if (sig == SIGINT && target->requested()) {
    end_by_sigint();
    return;
  }
  target->request(sig);
}

// The waiting thread: takes each signal of `set` sent to the process, until the destructor wakes it with
// `quitting` set.
void wait_for_signals(const sigset_t* set, const std::atomic<bool>* quitting) {
  for (;;) {
    int sig = 0;
    if (sigwait(set, &sig) != 0) continue;
    if (quitting->load()) return;
    on_stop_signal(sig);
  }
}

}  // namespace

StopOnSignals::StopOnSignals(StopRequest& stop, std::vector<int> signals) {
  StopRequest* none = nullptr;
  MT_CHECK(g_target.compare_exchange_strong(none, &stop),
           "StopOnSignals: another StopOnSignals is installed in this process (one at a time)");
  sigemptyset(&set_);
  for (int sig : signals) {
    // A signal the process was started with ignored stays ignored: the shell does that to SIGINT for a
    // background job (Ctrl-C is for the foreground one), nohup to SIGHUP.
    struct sigaction now {};
    if (sigaction(sig, nullptr, &now) != 0) {
      g_target.store(nullptr);
      MT_THROW("StopOnSignals: ", sig, " is not a signal this process can handle");
    }
    if (now.sa_handler == SIG_IGN) continue;
    signals_.push_back(sig);
    sigaddset(&set_, sig);
  }
  if (signals_.empty()) return;
  previous_.resize(signals_.size());
  for (size_t i = 0; i < signals_.size(); ++i) {
    // The fallback for threads that existed before: a handler that only sets the request. SA_RESTART: a
    // read or write it interrupts goes on (the run stops at the next step boundary, not with an EINTR
    // error in the middle of a file).
    struct sigaction action {};
    action.sa_handler = &on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    if (sigaction(signals_[i], &action, &previous_[i]) != 0) {
      for (size_t j = 0; j < i; ++j) sigaction(signals_[j], &previous_[j], nullptr);
      g_target.store(nullptr);
      MT_THROW("StopOnSignals: cannot handle signal ", signals_[i], " (", signal_name(signals_[i]), ")");
    }
  }
  // The waiting thread starts with every signal blocked, so the kernel never picks it for one it would run
  // a handler for; then this thread blocks the set, and the threads it starts later inherit that.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous_mask_);
  try {
    waiter_ = std::thread(&wait_for_signals, &set_, &quitting_);
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
    for (size_t i = 0; i < signals_.size(); ++i) sigaction(signals_[i], &previous_[i], nullptr);
    g_target.store(nullptr);
    throw;
  }
  sigset_t mask = previous_mask_;
  for (int sig : signals_) sigaddset(&mask, sig);
  pthread_sigmask(SIG_SETMASK, &mask, nullptr);
}

StopOnSignals::~StopOnSignals() {
  if (!signals_.empty()) {
    quitting_.store(true);
    pthread_kill(waiter_.native_handle(), signals_.front());
    waiter_.join();
    // A signal raised in this thread while the set was blocked (raise, pthread_kill) waits here, and one
    // sent to the process in the last instant: each is a request, not its old action once unblocked.
    const timespec now{};
    StopRequest* target = g_target.load();
    for (int sig; (sig = sigtimedwait(&set_, nullptr, &now)) > 0;) target->request(sig);
    for (size_t i = 0; i < signals_.size(); ++i) sigaction(signals_[i], &previous_[i], nullptr);
    pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
  }
  g_target.store(nullptr);
}

std::string signal_name(int signal) {
  switch (signal) {
    case 0: return "";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGXCPU: return "SIGXCPU";
    case SIGCONT: return "SIGCONT";
    default: return absl::StrCat("signal ", signal);
  }
}

}  // namespace mantissa

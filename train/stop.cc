// StopOnSignals: sigaction handlers that only touch lock-free atomics (async-signal-safe), and signal names.
#include "train/stop.h"

#include "absl/strings/str_cat.h"
#include "framework/error.h"

namespace mantissa {
namespace {

// The request the installed handlers set; null while no StopOnSignals lives.
std::atomic<StopRequest*> g_target{nullptr};

void on_stop_signal(int sig) {
  StopRequest* target = g_target.load();
  if (target == nullptr) return;
  if (sig == SIGINT && target->requested()) {
    // Ctrl-C twice: end now. signal() and raise() are async-signal-safe; the default action of SIGINT
    // ends the process the way a shell reports as 130.
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  target->request(sig);
}

}  // namespace

StopOnSignals::StopOnSignals(StopRequest& stop, std::vector<int> signals) : signals_(std::move(signals)) {
  StopRequest* none = nullptr;
  MT_CHECK(g_target.compare_exchange_strong(none, &stop),
           "StopOnSignals: another StopOnSignals is installed in this process (one at a time)");
  previous_.resize(signals_.size());
  for (size_t i = 0; i < signals_.size(); ++i) {
    // A signal the process was started with ignored stays ignored: the shell does that to SIGINT for a
    // background job (Ctrl-C is for the foreground one), nohup to SIGHUP.
    if (sigaction(signals_[i], nullptr, &previous_[i]) == 0 && previous_[i].sa_handler == SIG_IGN) continue;
    struct sigaction action {};
    action.sa_handler = &on_stop_signal;
    sigemptyset(&action.sa_mask);
    // SA_RESTART: a read or write the signal interrupts goes on (the run stops at the next step boundary,
    // not with an EINTR error in the middle of a file).
    action.sa_flags = SA_RESTART;
    if (sigaction(signals_[i], &action, &previous_[i]) != 0) {
      for (size_t j = 0; j < i; ++j) sigaction(signals_[j], &previous_[j], nullptr);
      g_target.store(nullptr);
      MT_THROW("StopOnSignals: cannot handle signal ", signals_[i], " (", signal_name(signals_[i]), ")");
    }
  }
}

StopOnSignals::~StopOnSignals() {
  for (size_t i = 0; i < signals_.size(); ++i) sigaction(signals_[i], &previous_[i], nullptr);
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

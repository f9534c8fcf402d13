// The NCCL group's watchdog: collectives in flight, their deadlines, the abort and its reason.
#include "framework/dist/nccl_watchdog.h"

#include <algorithm>
#include <utility>

#include "framework/error.h"

namespace mantissa::dist_detail {
namespace {

int64_t to_ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

NcclWatchdog::NcclWatchdog(NcclWatchdogBackend* backend, NcclWatchdogOptions options)
    : backend_(backend), options_(std::move(options)) {
  MT_ASSERT(backend_ != nullptr);
  if (options_.thread == WatchdogThread::kRun) thread_ = std::thread(&NcclWatchdog::thread_main, this);
}

NcclWatchdog::~NcclWatchdog() {
  stop_thread();
  // Without drain() (or after an abort, which empties the list) the events still tracked are released
  // here; CUDA defers the destruction of an event until it has completed.
  for (const InFlight& c : in_flight_) backend_->destroy_event(c.event);
}

uint64_t NcclWatchdog::launch(std::string_view op, std::string what, const std::function<EventId()>& enqueue) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.empty()) throw_broken(op);
  const EventId event = enqueue();  // throws before anything is tracked when the launch itself fails
  const bool was_idle = in_flight_.empty();
  in_flight_.push_back(
      {.seq = next_seq_, .op = std::string(op), .what = std::move(what), .event = event, .launched = backend_->now()});
  if (was_idle) wake_.notify_all();  // the thread sleeps without a deadline while nothing is in flight
  return next_seq_++;
}

void NcclWatchdog::poll() {
  std::lock_guard<std::mutex> lock(mu_);
  poll_locked();
}

void NcclWatchdog::poll_locked() {
  if (!broken_.empty() || in_flight_.empty()) return;
  const NcclWatchdogBackend::TimePoint now = backend_->now();
  // Collectives complete in launch order (one stream), so only a prefix of the list can be done.
  while (!in_flight_.empty()) {
    InFlight& head = in_flight_.front();
    std::string error;
    const NcclWatchdogBackend::EventState state = backend_->query_event(head.event, error);
    if (state == NcclWatchdogBackend::EventState::kPending) break;
    if (state == NcclWatchdogBackend::EventState::kFailed) {
      break_locked(head, detail::cat("failed: CUDA reported ", error, " after ",
                                     to_ms(now - std::max(head.launched, head_since_)), " ms"));
      return;
    }
    backend_->destroy_event(head.event);
    done_through_ = head.seq;
    in_flight_.pop_front();
    head_since_ = now;  // the next collective could start no earlier than this
  }
  if (in_flight_.empty()) return;
  const InFlight& head = in_flight_.front();
  const int64_t elapsed_ms = to_ms(now - std::max(head.launched, head_since_));
  // An asynchronous error belongs to the communicator, not to one call: it is charged to the oldest
  // collective in flight, the one the ranks are stuck in.
  const std::string async = backend_->async_error();
  if (!async.empty()) {
    break_locked(head, detail::cat("failed: NCCL reported \"", async, "\" after ", elapsed_ms, " ms"));
    return;
  }
  if (now - std::max(head.launched, head_since_) > options_.timeout) {
    break_locked(head, detail::cat("did not complete in ", elapsed_ms, " ms (timeout ", options_.timeout.count(),
                                   " ms; NCCL reported no error)"));
  }
}

void NcclWatchdog::break_locked(const InFlight& culprit, std::string_view failure) {
  broken_ = detail::cat("NCCL ", culprit.op, " #", culprit.seq, " (", culprit.what, ") on rank ", options_.rank, " of ",
                        options_.size, " (", options_.device, ") ", failure, "; the communicator was aborted");
  backend_->abort();
  // The aborted kernels return, so their events complete; nothing will read them.
  for (const InFlight& c : in_flight_) backend_->destroy_event(c.event);
  in_flight_.clear();
  if (options_.on_abort) options_.on_abort(broken_);
  wake_.notify_all();
}

void NcclWatchdog::throw_broken(std::string_view op) const {
  MT_THROW(op, ": the NCCL process group is unusable: ", broken_,
           ". HINT: another rank died or hung, or the ranks called collectives in different orders (a collective "
           "has the same number on every rank: compare the ranks' messages); raise ProcessGroupOptions::timeout "
           "if a rank is legitimately slow. The group cannot be used again: restart the job from its last "
           "checkpoint");
}

void NcclWatchdog::wait(uint64_t seq, std::string_view op) {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      poll_locked();
      if (seq <= done_through_) return;
      if (!broken_.empty()) throw_broken(detail::cat(op, " #", seq));
    }
    backend_->sleep_for(options_.host_interval);
  }
}

bool NcclWatchdog::check(uint64_t seq, std::string_view op) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (seq <= done_through_) return true;
  if (!broken_.empty()) throw_broken(detail::cat(op, " #", seq));
  return false;
}

void NcclWatchdog::check_usable(std::string_view op) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.empty()) throw_broken(op);
}

std::string NcclWatchdog::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

size_t NcclWatchdog::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_.size();
}

bool NcclWatchdog::drain() {
  stop_thread();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      poll_locked();
      if (!broken_.empty()) return false;
      if (in_flight_.empty()) return true;
    }
    backend_->sleep_for(options_.host_interval);
  }
}

void NcclWatchdog::thread_main() {
  backend_->enter_thread();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && broken_.empty()) {
    if (in_flight_.empty()) {
      wake_.wait(lock, [this] { return stop_ || !in_flight_.empty(); });
      continue;
    }
    if (wake_.wait_for(lock, options_.thread_interval, [this] { return stop_; })) break;
    poll_locked();
  }
}

void NcclWatchdog::stop_thread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace mantissa::dist_detail

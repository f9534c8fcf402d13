// StopRequest and StopOnSignals with real signals sent to this process: a handled signal only sets the
// request, the first reason is kept, the previous handlers come back, no handler runs on a computing thread
// started after it, and a second Ctrl-C ends the process at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <signal.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "framework/error.h"
#include "train/stop.h"

namespace mantissa {
namespace {

TEST(StopRequest, KeepsTheFirstReasonUntilCleared) {
  StopRequest stop;
  EXPECT_FALSE(stop.requested());
  EXPECT_EQ(stop.signal(), 0);
  stop.request(SIGTERM);
  stop.request(SIGUSR1);
  EXPECT_TRUE(stop.requested());
  EXPECT_EQ(stop.signal(), SIGTERM);
  stop.clear();
  EXPECT_FALSE(stop.requested());
  stop.request();  // a program's own condition: no signal
  EXPECT_TRUE(stop.requested());
  EXPECT_EQ(stop.signal(), 0);
}

TEST(StopRequest, ManyThreadsRequestingAtOnceKeepOneOfTheirReasons) {
  StopRequest stop;
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 1; t <= 8; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) {
      }
      stop.request(t);
    });
  }
  go = true;
  for (std::thread& t : threads) t.join();
  EXPECT_GE(stop.signal(), 1);
  EXPECT_LE(stop.signal(), 8);
}

std::atomic<int> g_previous_calls{0};
void previous_handler(int) { ++g_previous_calls; }

// Sends `sig` to this process, as kill(1), a scheduler or the terminal do.
void send_to_process(int sig) { ASSERT_EQ(kill(getpid(), sig), 0); }

// The waiting thread takes the signal a moment after kill() returns: waits up to 10 s for the request.
bool wait_for_request(const StopRequest& stop) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!stop.requested() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  return stop.requested();
}

TEST(StopOnSignals, ASignalRequestsAStopAndThePreviousHandlerComesBack) {
  std::signal(SIGUSR1, &previous_handler);
  {
    StopRequest stop;
    StopOnSignals signals(stop);
    send_to_process(SIGUSR1);  // taken: the process goes on
    ASSERT_TRUE(wait_for_request(stop));
    EXPECT_EQ(stop.signal(), SIGUSR1);
    send_to_process(SIGTERM);  // a later one changes nothing
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(stop.signal(), SIGUSR1);
    EXPECT_EQ(g_previous_calls, 0);
  }
  send_to_process(SIGUSR1);  // unblocked again here, so delivered before kill() returns
  EXPECT_EQ(g_previous_calls, 1);
  std::signal(SIGUSR1, SIG_DFL);
}

TEST(StopOnSignals, OnlyTheSignalsGivenAreHandled) {
  StopRequest stop;
  std::signal(SIGUSR2, &previous_handler);
  const int before = g_previous_calls;
  {
    StopOnSignals signals(stop, {SIGTERM});
    send_to_process(SIGUSR2);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(stop.requested());
    EXPECT_EQ(g_previous_calls, before + 1);
  }
  std::signal(SIGUSR2, SIG_DFL);
}

TEST(StopOnSignals, AnIgnoredSignalStaysIgnored) {
  std::signal(SIGUSR2, SIG_IGN);  // as a shell leaves SIGINT for a background job
  StopRequest stop;
  {
    StopOnSignals signals(stop, {SIGUSR2, SIGUSR1});
    send_to_process(SIGUSR2);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(stop.requested());
    send_to_process(SIGUSR1);
    ASSERT_TRUE(wait_for_request(stop));
    EXPECT_EQ(stop.signal(), SIGUSR1);
  }
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  std::signal(SIGUSR2, SIG_DFL);
  std::signal(SIGUSR1, SIG_DFL);
}

// The reason for the waiting thread: a thread started after it (OpenMP, a loader) has the signals blocked,
// so a handler never runs on it (oneDNN's sgemm points the stack pointer into the heap while it runs).
TEST(StopOnSignals, ThreadsStartedLaterHaveTheSignalsBlocked) {
  StopRequest stop;
  StopOnSignals signals(stop);
  sigset_t in_worker;
  std::thread([&] { pthread_sigmask(SIG_BLOCK, nullptr, &in_worker); }).join();
  EXPECT_EQ(sigismember(&in_worker, SIGTERM), 1);
  EXPECT_EQ(sigismember(&in_worker, SIGINT), 1);
  EXPECT_EQ(sigismember(&in_worker, SIGUSR1), 1);
  EXPECT_EQ(sigismember(&in_worker, SIGUSR2), 0);
  // A signal sent while every computing thread blocks it is still taken.
  send_to_process(SIGTERM);
  ASSERT_TRUE(wait_for_request(stop));
  EXPECT_EQ(stop.signal(), SIGTERM);
}

TEST(StopOnSignals, ASignalRaisedInTheBlockingThreadIsARequestAtTheEnd) {
  StopRequest stop;
  {
    StopOnSignals signals(stop);
    ASSERT_EQ(std::raise(SIGUSR1), 0);  // pending in this thread, which blocks it
  }
  EXPECT_EQ(stop.signal(), SIGUSR1);  // taken by the destructor, not delivered with the default action
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  EXPECT_EQ(sigismember(&mask, SIGUSR1), 0) << "the thread's mask comes back";
}

TEST(StopOnSignals, OneAtATime) {
  StopRequest a, b;
  StopOnSignals first(a);
  try {
    StopOnSignals second(b);
    FAIL() << "a second StopOnSignals was installed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another StopOnSignals"), std::string::npos) << e.what();
  }
}

TEST(StopOnSignalsDeathTest, ASecondCtrlCEndsTheProcessAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        StopRequest stop;
        StopOnSignals signals(stop);
        kill(getpid(), SIGINT);  // the first asks for a stop
        if (!wait_for_request(stop)) std::_Exit(3);
        kill(getpid(), SIGINT);  // the second ends the process by SIGINT
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::_Exit(4);
      },
      ::testing::KilledBySignal(SIGINT), "");
}

TEST(SignalName, NamesTheSignalsSchedulersSend) {
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGINT), "SIGINT");
  EXPECT_EQ(signal_name(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(signal_name(0), "");
  EXPECT_EQ(signal_name(40), "signal 40");
}

}  // namespace
}  // namespace mantissa

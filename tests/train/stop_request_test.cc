// StopRequest and StopOnSignals with real signals sent to this process: a handled signal only sets the
// request, the first reason is kept, the previous handlers come back, and a second Ctrl-C ends the
// process at once.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <thread>
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

int g_previous_calls = 0;
void previous_handler(int) { ++g_previous_calls; }

TEST(StopOnSignals, ASignalRequestsAStopAndThePreviousHandlerComesBack) {
  std::signal(SIGUSR1, &previous_handler);
  {
    StopRequest stop;
    StopOnSignals signals(stop);
    ASSERT_EQ(std::raise(SIGUSR1), 0);  // handled: the process goes on
    EXPECT_TRUE(stop.requested());
    EXPECT_EQ(stop.signal(), SIGUSR1);
    ASSERT_EQ(std::raise(SIGTERM), 0);  // a later one changes nothing
    EXPECT_EQ(stop.signal(), SIGUSR1);
    EXPECT_EQ(g_previous_calls, 0);
  }
  ASSERT_EQ(std::raise(SIGUSR1), 0);
  EXPECT_EQ(g_previous_calls, 1);
  std::signal(SIGUSR1, SIG_DFL);
}

TEST(StopOnSignals, OnlyTheSignalsGivenAreHandled) {
  StopRequest stop;
  std::signal(SIGUSR2, &previous_handler);
  const int before = g_previous_calls;
  {
    StopOnSignals signals(stop, {SIGTERM});
    ASSERT_EQ(std::raise(SIGUSR2), 0);
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
    ASSERT_EQ(std::raise(SIGUSR2), 0);
    EXPECT_FALSE(stop.requested());
    ASSERT_EQ(std::raise(SIGUSR1), 0);
    EXPECT_EQ(stop.signal(), SIGUSR1);
  }
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  std::signal(SIGUSR2, SIG_DFL);
  std::signal(SIGUSR1, SIG_DFL);
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
        std::raise(SIGINT);  // the first asks for a stop
        if (!stop.requested()) std::_Exit(3);
        std::raise(SIGINT);  // the second ends the process by SIGINT
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

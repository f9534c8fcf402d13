// A writer killed at a random moment (SIGKILL, no cleanup) never leaves a broken checkpoint behind: every
// step_*.h5 in the folder loads, and `latest` names one that loads, whenever the kill came.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <signal.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "tests/train/checkpoint_support.h"

namespace mantissa {
namespace {

TEST(CheckpointCrash, AWriterKilledAtRandomMomentsNeverLeavesABrokenCheckpoint) {
  testing::SmallRun run;
  Checkpoint c = run.checkpoint();
  c.model.push_back({"padding", zeros({64, 1024})});  // 256 KiB: the kill often lands mid-write
  std::mt19937_64 rng(7);
  int killed_with_latest = 0, mid_write = 0;
  for (int trial = 0; trial < 24; ++trial) {
    testing::ScratchDir dir;
    const std::string root = dir.file("ckpt");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // The child only writes (no threads, no gtest): checkpoints of increasing steps until it is killed.
      CheckpointDir out(root, 2);
      for (int64_t step = 1;; ++step) {
        c.trainer.step = step;
        if (!out.write(c).ok()) ::_exit(3);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 80000));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer failed on its own, exit status " << WEXITSTATUS(status);

    const absl::StatusOr<std::string> latest = CheckpointDir(root).latest();
    if (!latest.ok()) {  // killed before the first `latest`: then no step file may be half there either
      EXPECT_EQ(latest.status().code(), absl::StatusCode::kNotFound) << latest.status();
    } else {
      ++killed_with_latest;
      const absl::StatusOr<Checkpoint> loaded = load_checkpoint(*latest);
      ASSERT_TRUE(loaded.ok()) << "trial " << trial << ": " << loaded.status();
      EXPECT_EQ(*latest, root + "/step_" + std::to_string(loaded->trainer.step) + ".h5");
    }
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("step_", 0) == 0) {
        EXPECT_TRUE(load_checkpoint(e.path().string()).ok()) << name;
      }
      mid_write += name.find(".tmp.") != std::string::npos;
    }
  }
  RecordProperty("trials_with_latest", killed_with_latest);
  RecordProperty("killed_mid_write", mid_write);  // a temporary file was left: the kill hit a write
  std::printf("%d trials with a latest checkpoint, %d killed mid-write\n", killed_with_latest, mid_write);
  EXPECT_GE(killed_with_latest, 5) << "too few kills came after the first checkpoint to show anything";
}

}  // namespace
}  // namespace mantissa

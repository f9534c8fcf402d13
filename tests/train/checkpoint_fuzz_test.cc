// CheckpointFuzzCorpus: thousands of deterministic mutations of a valid checkpoint (bit flips, random bytes,
// truncations, inserted, removed and duplicated chunks) through load_checkpoint: never a crash, and every
// result either an error naming the file or a checkpoint. Part one keeps the seal as it was (every change
// must be refused, or the file must load unchanged); part two reseals each mutant, so HDF5 and the
// structural checks see the damage themselves (what a buggy tool writing a valid seal would produce).
// The libFuzzer target over the same loader is tests/fuzz/checkpoint_fuzz.cc (MANTISSA_FUZZ=ON).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <random>

#include "tests/train/checkpoint_support.h"

namespace mantissa {
namespace {

using testing::ScratchDir;

// One random edit of `b`; never touches the first `from` bytes.
std::string mutate(std::string b, std::mt19937_64& rng, size_t from) {
  auto pick = [&](size_t lo, size_t hi) { return lo >= hi ? lo : lo + rng() % (hi - lo); };
  const size_t n = b.size();
  switch (rng() % 8) {
    case 0: {  // flip one bit
      const size_t at = pick(from, n);
      b[at] = static_cast<char>(b[at] ^ (1 << (rng() % 8)));
      break;
    }
    case 1: {  // a random byte
      b[pick(from, n)] = static_cast<char>(rng());
      break;
    }
    case 2:  // truncate
      b.resize(pick(from, n));
      break;
    case 3: {  // a run of random bytes
      const size_t at = pick(from, n), len = std::min<size_t>(1 + rng() % 64, n - at);
      for (size_t i = 0; i < len; ++i) b[at + i] = static_cast<char>(rng());
      break;
    }
    case 4: {  // insert random bytes
      std::string chunk(1 + rng() % 32, '\0');
      for (char& c : chunk) c = static_cast<char>(rng());
      b.insert(pick(from, n), chunk);
      break;
    }
    case 5: {  // remove a chunk
      const size_t at = pick(from, n);
      b.erase(at, std::min<size_t>(1 + rng() % 128, n - at));
      break;
    }
    case 6: {  // duplicate a chunk elsewhere (plausible-looking structure in the wrong place)
      const size_t src = pick(from, n), len = std::min<size_t>(8 + rng() % 64, n - src);
      const size_t dst = pick(from, n - len);
      b.replace(dst, len, b.substr(src, len));
      break;
    }
    default: {  // zero or 0xff a 1..8-byte field (sizes, addresses, counts)
      const size_t at = pick(from, n), len = std::min<size_t>(1 + rng() % 8, n - at);
      const char fill = rng() % 2 ? '\0' : '\xff';
      for (size_t i = 0; i < len; ++i) b[at + i] = fill;
      break;
    }
  }
  return b;
}

TEST(CheckpointFuzzCorpus, MutatedFilesNeverCrashTheLoader) {
  testing::SmallRun run;
  ScratchDir dir;
  const std::string path = dir.file("valid.h5"), bad = dir.file("mutant.h5");
  const Checkpoint saved = run.checkpoint();
  ASSERT_TRUE(save_checkpoint(path, saved).ok());
  const std::string valid = testing::read_bytes(path);
  // A fixed seed in CI; MANTISSA_FUZZ_SEED=<n> explores other corpora.
  const char* seed_env = std::getenv("MANTISSA_FUZZ_SEED");
  std::mt19937_64 rng(seed_env ? std::strtoull(seed_env, nullptr, 10) : 20261122);
  const auto start = std::chrono::steady_clock::now();
  const auto open_fds = [] { return std::distance(std::filesystem::directory_iterator("/proc/self/fd"), {}); };
  const auto fds_before = open_fds();
  int sealed_errors = 0, sealed_unchanged = 0, resealed_errors = 0, resealed_loaded = 0;

  // Part one: the seal as written; up to three edits per mutant, anywhere (the header too).
  for (int i = 0; i < 1500; ++i) {
    std::string b = valid;
    for (int k = 0, edits = 1 + static_cast<int>(rng() % 3); k < edits; ++k) b = mutate(b, rng, 0);
    testing::write_bytes(bad, b);
    const absl::StatusOr<Checkpoint> c = load_checkpoint(bad);
    if (c.ok()) {
      ASSERT_EQ(b, valid) << "mutant " << i << " was changed yet accepted";
      testing::expect_same_checkpoint(saved, *c);
      ++sealed_unchanged;
    } else {
      ASSERT_EQ(std::string(c.status().message()).rfind(bad + ": ", 0), 0u) << c.status();
      ++sealed_errors;
    }
  }
  // Part two: edits after the header, then a fresh seal: HDF5 parses the damage.
  for (int i = 0; i < 1000; ++i) {
    std::string b = mutate(valid, rng, checkpoint_file::kHeaderBytes);
    if (b.size() < checkpoint_file::kHeaderBytes) continue;
    testing::write_bytes(bad, b);
    ASSERT_TRUE(checkpoint_file::seal(bad).ok());
    const absl::StatusOr<Checkpoint> c = load_checkpoint(bad);
    if (c.ok()) {
      // Accepted: damage in tensor bytes or padding. Whatever was read must still be usable as a checkpoint.
      ++resealed_loaded;
      (void)check_compatible(bad, *c, run.model, run.opt);
    } else {
      ASSERT_EQ(std::string(c.status().message()).rfind(bad + ": ", 0), 0u) << c.status();
      ++resealed_errors;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("sealed_errors", sealed_errors);
  RecordProperty("resealed_errors", resealed_errors);
  RecordProperty("resealed_loaded", resealed_loaded);
  std::printf("fuzz corpus: %d sealed mutants refused, %d unchanged; resealed: %d refused, %d loaded; %.1f s\n",
              sealed_errors, sealed_unchanged, resealed_errors, resealed_loaded, seconds);
  EXPECT_EQ(open_fds(), fds_before) << "a refused file left a file descriptor open";
  EXPECT_GT(sealed_errors, 1400);  // nearly every mutant differs from the file, and the seal catches it
  EXPECT_GT(resealed_errors, 0);   // HDF5 or the structural checks catch metadata damage
}

}  // namespace
}  // namespace mantissa

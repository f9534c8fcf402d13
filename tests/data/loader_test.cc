// Dataset, DataLoader and sharding: order determinism, drop_last, resume, prefetch, errors from the worker,
// and the DistributedSampler property (2 ranks x batch B == 1 rank x batch 2B per step).
#include "data/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "framework/cuda/allocator.h"
#include "framework/cuda/device.h"
#include "framework/error.h"

namespace mantissa {
namespace {

// x[i] = [i, 10 i] as f32, y[i] = i as i64: a batch's content tells which indices it holds.
std::shared_ptr<TensorDataset> numbered(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(10 * i));
    y.push_back(i);
  }
  return std::make_shared<TensorDataset>(std::vector<Tensor>{from_vector(x, {n, 2}), from_vector(y, {n})});
}

std::vector<int64_t> labels_of(const Example& b) {
  const int64_t* p = b[1].data<int64_t>();
  return {p, p + b[1].numel()};
}

std::vector<std::vector<int64_t>> run_epoch(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  while (auto b = loader.next()) out.push_back(labels_of(*b));
  return out;
}

TEST(TensorDataset, GetAndBatchGather) {
  auto ds = numbered(5);
  EXPECT_EQ(ds->size(), 5);
  Example e = ds->get(3);
  EXPECT_EQ(e[0].shape(), (Shape{2}));
  EXPECT_EQ(e[0].data<float>()[1], 30.0f);
  const std::vector<int64_t> idx{4, 0, 4};
  Example b = ds->get_batch(idx);
  EXPECT_EQ(b[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(b[0].data<float>()[0], 4.0f);
  EXPECT_EQ(b[0].data<float>()[3], 0.0f);
  EXPECT_EQ(labels_of(b), idx);
  // The generic path (stacking get(i)) gives the same batch.
  Example s = ds->Dataset::get_batch(idx);
  EXPECT_EQ(s[0].shape(), b[0].shape());
  EXPECT_TRUE(std::equal(s[0].data<float>(), s[0].data<float>() + 6, b[0].data<float>()));
  EXPECT_THROW(TensorDataset({zeros({3}), zeros({4})}), Error);
}

TEST(EpochOrder, PermutationDeterminedBySeedAndEpoch) {
  auto a = epoch_order(1000, Shuffle::kRandom, 7, 3);
  EXPECT_EQ(a, epoch_order(1000, Shuffle::kRandom, 7, 3));
  EXPECT_NE(a, epoch_order(1000, Shuffle::kRandom, 7, 4));
  EXPECT_NE(a, epoch_order(1000, Shuffle::kRandom, 8, 3));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, epoch_order(1000, Shuffle::kNone, 7, 3));  // a permutation of 0..999
  EXPECT_NE(a, sorted);
}

TEST(DataLoader, SequentialBatchesAndPartialLast) {
  DataLoader loader(numbered(10), {.batch_size = 4});
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  auto batches = run_epoch(loader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(batches[2], (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(loader.position(), (LoaderPosition{.epoch = 1, .batch = 0}));
}

TEST(DataLoader, DropLast) {
  DataLoader loader(numbered(10), {.batch_size = 4, .shuffle = Shuffle::kRandom, .drop_last = DropLast::kYes});
  EXPECT_EQ(loader.batches_per_epoch(), 2);
  auto batches = run_epoch(loader);
  ASSERT_EQ(batches.size(), 2u);
  for (const auto& b : batches) EXPECT_EQ(b.size(), 4u);
}

TEST(DataLoader, ShuffledOrderDeterministicAcrossLoadersAndPrefetch) {
  const DataLoaderOptions opts{.batch_size = 7, .shuffle = Shuffle::kRandom, .seed = 42};
  DataLoader a(numbered(50), opts);
  DataLoaderOptions sync = opts;
  sync.prefetch = 0;
  DataLoader b(numbered(50), sync);
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto ea = run_epoch(a);
    auto eb = run_epoch(b);
    EXPECT_EQ(ea, eb) << "epoch " << epoch;
    std::set<int64_t> seen;
    for (const auto& batch : ea) seen.insert(batch.begin(), batch.end());
    EXPECT_EQ(seen.size(), 50u);  // every sample exactly once
    // The batches match the order the loader reports.
    for (size_t i = 0; i < ea.size(); ++i) EXPECT_EQ(ea[i], a.batch_indices(epoch, static_cast<int64_t>(i)));
  }
  DataLoader c(numbered(50), opts);
  auto e0 = run_epoch(c);
  EXPECT_NE(e0, run_epoch(c));  // a new epoch reshuffles
}

TEST(DataLoader, ResumeYieldsExactlyTheRemainingBatches) {
  const DataLoaderOptions opts{.batch_size = 3, .shuffle = Shuffle::kRandom, .seed = 5, .prefetch = 3};
  DataLoader full(numbered(20), opts);
  run_epoch(full);
  auto reference = run_epoch(full);  // epoch 1
  DataLoader first(numbered(20), opts);
  run_epoch(first);
  first.next();
  first.next();
  const LoaderPosition saved = first.position();
  EXPECT_EQ(saved, (LoaderPosition{.epoch = 1, .batch = 2}));
  DataLoader resumed(numbered(20), opts);
  resumed.set_position(saved);
  auto rest = run_epoch(resumed);
  EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(reference.begin() + 2, reference.end()));
  EXPECT_EQ(resumed.position(), (LoaderPosition{.epoch = 2, .batch = 0}));
  EXPECT_THROW(resumed.set_position({.epoch = 0, .batch = 99}), Error);
}

// A dataset whose example 13 cannot be read, to check that worker errors reach the caller.
class Faulty final : public Dataset {
 public:
  int64_t size() const override { return 20; }
  Example get(int64_t index) const override {
    if (index == 13) throw std::runtime_error("example 13 unreadable");
    return {full({2}, static_cast<double>(index))};
  }
};

TEST(DataLoader, WorkerErrorRethrownInConsumer) {
  DataLoader loader(std::make_shared<Faulty>(), {.batch_size = 5, .prefetch = 2});
  EXPECT_TRUE(loader.next().has_value());
  EXPECT_TRUE(loader.next().has_value());
  try {
    loader.next();
    FAIL() << "expected the worker's error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "example 13 unreadable");
  }
  EXPECT_THROW(loader.next(), std::runtime_error);  // still at the bad batch: the same error again
  EXPECT_EQ(loader.position(), (LoaderPosition{.epoch = 0, .batch = 2}));
  // Skipping past the bad batch recovers.
  loader.set_position({.epoch = 0, .batch = 3});
  auto b = loader.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ((*b)[0].data<float>()[0], 15.0f);
}

TEST(DataLoader, DestructorStopsAWorkerWithAFullQueue) {
  for (int i = 0; i < 20; ++i) {
    DataLoader loader(numbered(1000), {.batch_size = 10, .prefetch = 4});
    loader.next();
  }  // joins cleanly each time (a hang or crash would fail the test)
}

// Counts get_batch calls, to see the worker fill its bounded queue ahead of the consumer.
class Counting final : public Dataset {
 public:
  int64_t size() const override { return 100; }
  Example get(int64_t index) const override { return {full({1}, static_cast<double>(index))}; }
  Example get_batch(std::span<const int64_t> indices) const override {
    ++calls;
    return Dataset::get_batch(indices);
  }
  mutable std::atomic<int> calls{0};
};

TEST(DataLoader, WorkerFillsTheBoundedQueueAhead) {
  auto ds = std::make_shared<Counting>();
  DataLoader loader(ds, {.batch_size = 10, .prefetch = 3});
  ASSERT_TRUE(loader.next().has_value());
  // Without the consumer asking, the worker prepares exactly `prefetch` more batches, then blocks.
  for (int i = 0; i < 500 && ds->calls < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a worker that ignored the bound would run on
  EXPECT_EQ(ds->calls, 4);
  // Those batches are the right ones, served from the queue.
  auto b = loader.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ((*b)[0].data<float>()[0], 10.0f);
}

TEST(ShardOrder, PadsLikeDistributedSampler) {
  const std::vector<int64_t> order{5, 3, 8, 1, 0};  // n = 5, W = 3: padded to 6 with order[0]
  EXPECT_EQ(shard_order(order, {.rank = 0, .world_size = 3}), (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(shard_order(order, {.rank = 1, .world_size = 3}), (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(shard_order(order, {.rank = 2, .world_size = 3}), (std::vector<int64_t>{8, 5}));
  // Padding longer than n repeats the order several times, as PyTorch does.
  EXPECT_EQ(shard_order({4, 2}, {.rank = 4, .world_size = 5}), (std::vector<int64_t>{4}));
}

// PyTorch DistributedSampler(drop_last=True): indices[:total_size], total_size = floor(n / W) * W, then
// indices[rank:total_size:W]. Hand-computed from that rule for order {5, 3, 8, 1, 0, 7, 2}.
TEST(ShardOrder, DropLastTruncatesLikeDistributedSampler) {
  const std::vector<int64_t> order{5, 3, 8, 1, 0, 7, 2};                // n = 7
  const ShardOptions w3{.world_size = 3, .drop_last = DropLast::kYes};  // total_size 6: drops the 2
  EXPECT_EQ(shard_order(order, {.rank = 0, .world_size = 3, .drop_last = DropLast::kYes}),
            (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(shard_order(order, {.rank = 1, .world_size = 3, .drop_last = DropLast::kYes}),
            (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(shard_order(order, {.rank = 2, .world_size = 3, .drop_last = DropLast::kYes}),
            (std::vector<int64_t>{8, 7}));
  EXPECT_EQ(shard_size(7, w3), 2);
  // W = 2: total_size 6, rank 1 gets 3, 1, 7.
  EXPECT_EQ(shard_order(order, {.rank = 1, .world_size = 2, .drop_last = DropLast::kYes}),
            (std::vector<int64_t>{3, 1, 7}));
  // n divisible by W: nothing dropped, the same as padding mode (which pads nothing).
  const std::vector<int64_t> six{5, 3, 8, 1, 0, 7};
  for (int64_t r = 0; r < 3; ++r) {
    EXPECT_EQ(shard_order(six, {.rank = r, .world_size = 3, .drop_last = DropLast::kYes}),
              shard_order(six, {.rank = r, .world_size = 3}));
  }
  // n < W: PyTorch's num_samples is ceil((n - W) / W) = 0, so every rank gets nothing.
  EXPECT_TRUE(shard_order({4, 2}, {.rank = 1, .world_size = 5, .drop_last = DropLast::kYes}).empty());
  EXPECT_EQ(shard_size(2, {.world_size = 5, .drop_last = DropLast::kYes}), 0);
  EXPECT_EQ(shard_size(2, {.world_size = 5}), 1);  // padding: ceil(2 / 5)
  // world_size 1 never drops anything.
  EXPECT_EQ(shard_order(order, {.drop_last = DropLast::kYes}), order);
}

TEST(ShardOrder, RanksTogetherCoverTheOrderOnce) {
  const std::vector<int64_t> order = epoch_order(23, Shuffle::kRandom, 4, 1);
  for (int64_t w : {2, 3, 4, 5}) {
    std::multiset<int64_t> truncated, padded;
    for (int64_t r = 0; r < w; ++r) {
      for (int64_t i : shard_order(order, {.rank = r, .world_size = w, .drop_last = DropLast::kYes})) {
        truncated.insert(i);
      }
      for (int64_t i : shard_order(order, {.rank = r, .world_size = w})) padded.insert(i);
    }
    const int64_t total = 23 / w * w;
    // Truncation: exactly the first floor(n / W) * W samples of the order, each once.
    EXPECT_EQ(truncated, std::multiset<int64_t>(order.begin(), order.begin() + total)) << "W " << w;
    // Padding: every sample at least once, ceil(n / W) * W in all.
    EXPECT_EQ(static_cast<int64_t>(padded.size()), (23 + w - 1) / w * w) << "W " << w;
    for (int64_t i = 0; i < 23; ++i) EXPECT_GE(padded.count(i), 1u) << "W " << w << " sample " << i;
  }
}

TEST(DistributedLoader, DropLastLoaderSizes) {
  DataLoader r1(numbered(61), {.batch_size = 4, .shard = {.rank = 1, .world_size = 2, .drop_last = DropLast::kYes}});
  EXPECT_EQ(r1.samples_per_epoch(), 30);
  EXPECT_EQ(r1.batches_per_epoch(), 8);  // 7 of 4 and one of 2
  const auto batches = run_epoch(r1);
  ASSERT_EQ(batches.size(), 8u);
  EXPECT_EQ(batches.back(), (std::vector<int64_t>{57, 59}));  // no shuffle: rank 1 holds the odd samples < 60
}

// Sampler truncation plus batch drop_last on every rank matches one rank with batch drop_last at every step,
// whatever n: floor(floor(n / 2) / B) == floor(n / 2B).
TEST(DistributedLoader, DropLastTwoRanksOfBMatchOneRankOf2BAtEveryStep) {
  for (int64_t n : {64, 61, 63, 67}) {
    const int64_t B = 4;
    const ShardOptions rank0{.rank = 0, .world_size = 2, .drop_last = DropLast::kYes};
    const ShardOptions rank1{.rank = 1, .world_size = 2, .drop_last = DropLast::kYes};
    DataLoader one(numbered(n),
                   {.batch_size = 2 * B, .shuffle = Shuffle::kRandom, .seed = 9, .drop_last = DropLast::kYes});
    DataLoader r0(
        numbered(n),
        {.batch_size = B, .shuffle = Shuffle::kRandom, .seed = 9, .drop_last = DropLast::kYes, .shard = rank0});
    DataLoader r1(
        numbered(n),
        {.batch_size = B, .shuffle = Shuffle::kRandom, .seed = 9, .drop_last = DropLast::kYes, .shard = rank1});
    for (int epoch = 0; epoch < 2; ++epoch) {
      auto single = run_epoch(one), a = run_epoch(r0), b = run_epoch(r1);
      ASSERT_EQ(a.size(), single.size()) << "n " << n;
      ASSERT_EQ(b.size(), single.size()) << "n " << n;
      for (size_t s = 0; s < single.size(); ++s) {
        std::multiset<int64_t> together(a[s].begin(), a[s].end());
        together.insert(b[s].begin(), b[s].end());
        EXPECT_EQ(together, std::multiset<int64_t>(single[s].begin(), single[s].end())) << "n " << n << " step " << s;
      }
    }
  }
}

// Sampler truncation with partial last batches: the last step of the 2 ranks is the single rank's last batch
// less the one sample truncation drops (n odd), never a repeated sample.
TEST(DistributedLoader, DropLastShardNeverRepeatsASample) {
  const int64_t n = 61, B = 4;
  DataLoader one(numbered(n), {.batch_size = 2 * B, .shuffle = Shuffle::kRandom, .seed = 3});
  DataLoader r0(numbered(n), {.batch_size = B,
                              .shuffle = Shuffle::kRandom,
                              .seed = 3,
                              .shard = {.rank = 0, .world_size = 2, .drop_last = DropLast::kYes}});
  DataLoader r1(numbered(n), {.batch_size = B,
                              .shuffle = Shuffle::kRandom,
                              .seed = 3,
                              .shard = {.rank = 1, .world_size = 2, .drop_last = DropLast::kYes}});
  auto single = run_epoch(one), a = run_epoch(r0), b = run_epoch(r1);
  ASSERT_EQ(a.size(), single.size());
  ASSERT_EQ(b.size(), single.size());
  std::multiset<int64_t> seen;
  for (size_t s = 0; s < single.size(); ++s) {
    std::multiset<int64_t> together(a[s].begin(), a[s].end());
    together.insert(b[s].begin(), b[s].end());
    std::multiset<int64_t> expected(single[s].begin(), single[s].end());
    if (s + 1 == single.size()) expected.erase(expected.find(single[s].back()));  // order[60], truncated
    EXPECT_EQ(together, expected) << "step " << s;
    seen.insert(together.begin(), together.end());
  }
  EXPECT_EQ(seen.size(), 60u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 60u);  // no sample twice
}

TEST(DistributedLoader, TwoRanksOfBMatchOneRankOf2B) {
  for (int64_t n : {64, 61}) {  // 61: odd, padded by one repeated sample
    const int64_t B = 4;
    DataLoader one(numbered(n), {.batch_size = 2 * B, .shuffle = Shuffle::kRandom, .seed = 9});
    DataLoader r0(numbered(n), {.batch_size = B, .shuffle = Shuffle::kRandom, .seed = 9, .shard = {0, 2}});
    DataLoader r1(numbered(n), {.batch_size = B, .shuffle = Shuffle::kRandom, .seed = 9, .shard = {1, 2}});
    for (int epoch = 0; epoch < 2; ++epoch) {
      auto single = run_epoch(one), a = run_epoch(r0), b = run_epoch(r1);
      ASSERT_EQ(a.size(), b.size());
      const size_t steps = n % 2 == 0 ? single.size() : single.size() - 1;  // the padded last step differs
      for (size_t s = 0; s < steps; ++s) {
        std::multiset<int64_t> together(a[s].begin(), a[s].end());
        together.insert(b[s].begin(), b[s].end());
        EXPECT_EQ(together, std::multiset<int64_t>(single[s].begin(), single[s].end())) << "n " << n << " step " << s;
      }
    }
  }
}

// Pinned batches: refused clearly without a GPU; with one, every tensor of every batch is pinned and holds
// the same values as an unpinned loader's.
TEST(DataLoaderPinMemory, NeedsAGpuAndPinsEveryBatch) {
  if (cuda_device_count() == 0) {
    try {
      DataLoader loader(numbered(10), {.batch_size = 4, .pin_memory = PinMemory::kYes});
      FAIL() << "a pinning loader was built without a GPU";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("pin_memory needs a GPU"), std::string::npos) << e.what();
    }
    GTEST_SKIP() << "no CUDA device (the refusal was checked): " << cuda_unavailable_reason();
  }
  DataLoader pinned(numbered(10),
                    {.batch_size = 4, .shuffle = Shuffle::kRandom, .seed = 3, .pin_memory = PinMemory::kYes});
  DataLoader plain(numbered(10), {.batch_size = 4, .shuffle = Shuffle::kRandom, .seed = 3});
  int batches = 0;
  while (auto a = pinned.next()) {
    auto b = plain.next();
    ASSERT_TRUE(b.has_value());
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      EXPECT_TRUE(is_pinned((*a)[i]));
      EXPECT_EQ((*a)[i].to(DType::kF64).to(kCPU).str(), (*b)[i].to(DType::kF64).str());
    }
    ++batches;
  }
  EXPECT_EQ(batches, 3);
}

}  // namespace
}  // namespace mantissa

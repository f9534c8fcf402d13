// StepValues: the slots of a step's record with and without several ranks and a loss scaler, records built
// then decoded (one rank; three ranks whose loss slots are summed as their all-reduce would), the stop vote
// decided by most ranks with its tie rule, and a record of the wrong size refused.
#include "train/step_values.h"

#include <gtest/gtest.h>

#include <csignal>
#include <limits>
#include <utility>
#include <vector>

#include "framework/error.h"
#include "ops/elementwise/elementwise.h"

namespace mantissa {
namespace {

Tensor f64_scalar(double v) { return full({}, v, {.dtype = DType::kF64}); }

// A host record with `values` at the layout's slots and 0 elsewhere.
Tensor record_of(const StepValues& layout, const std::vector<std::pair<int64_t, double>>& values) {
  std::vector<double> record(static_cast<size_t>(layout.size()), 0.0);
  for (const auto& [slot, value] : values) record.at(static_cast<size_t>(slot)) = value;
  return from_vector(record);
}

TEST(StepValues, SlotsOfOneRank) {
  const StepValues plain({.world_size = 1, .scaler = false});
  EXPECT_EQ(plain.loss_slot(), 0);
  EXPECT_EQ(plain.grad_norm_slot(), 1);
  EXPECT_EQ(plain.size(), 2);
  EXPECT_THROW(plain.scale_slot(), Error);
  EXPECT_THROW(plain.found_inf_slot(), Error);
  EXPECT_THROW(plain.stop_slot(0), Error);

  const StepValues scaled({.world_size = 1, .scaler = true});
  EXPECT_EQ(scaled.grad_norm_slot(), 1);
  EXPECT_EQ(scaled.scale_slot(), 2);
  EXPECT_EQ(scaled.found_inf_slot(), 3);
  EXPECT_EQ(scaled.size(), 4);
}

TEST(StepValues, SlotsOfSeveralRanksPutTheStopVotesAfterTheLoss) {
  const StepValues layout({.world_size = 4, .scaler = true});
  EXPECT_EQ(layout.loss_slot(), 0);
  EXPECT_EQ(layout.stop_slot(0), 1);
  EXPECT_EQ(layout.stop_slot(SIGTERM), 1 + SIGTERM);
  EXPECT_EQ(layout.stop_slot(kStopSlots - 1), kStopSlots);
  EXPECT_THROW(layout.stop_slot(kStopSlots), Error);
  EXPECT_THROW(layout.stop_slot(-1), Error);
  EXPECT_EQ(layout.grad_norm_slot(), 1 + kStopSlots);
  EXPECT_EQ(layout.scale_slot(), 2 + kStopSlots);
  EXPECT_EQ(layout.found_inf_slot(), 3 + kStopSlots);
  EXPECT_EQ(layout.size(), 4 + kStopSlots);
  EXPECT_EQ(StepValues({.world_size = 2, .scaler = false}).size(), 2 + kStopSlots);
  EXPECT_THROW(StepValues({.world_size = 0}), Error);
}

TEST(StepValues, StopVoteIsTheRequestedSignalInTheSlotRange) {
  StopRequest stop;
  EXPECT_EQ(stop_vote(stop), -1);
  stop.request();
  EXPECT_EQ(stop_vote(stop), 0);
  stop.clear();
  stop.request(SIGTERM);
  EXPECT_EQ(stop_vote(stop), SIGTERM);
  stop.clear();
  stop.request(kStopSlots + 7);  // past the slots: counted in the last one
  EXPECT_EQ(stop_vote(stop), kStopSlots - 1);
}

TEST(StepValues, OneRankWithAScalerRoundTrips) {
  const StepValues layout({.world_size = 1, .scaler = true});
  StepValues::Builder record(layout, kCPU);
  const Tensor loss_slots = record.loss(f64_scalar(2.5), SIGTERM);  // one rank: the vote is not carried
  EXPECT_EQ(loss_slots.numel(), 1);
  record.grad_norm(f64_scalar(3.25));
  record.scaler(f64_scalar(65536.0), full({}, 1.0));  // found_inf as the scaler keeps it, f32
  HostCopy copy = std::move(record).start_copy();
  const Tensor& host = copy.wait();
  ASSERT_EQ(host.numel(), layout.size());
  const double* v = host.data<double>();
  EXPECT_EQ(v[layout.loss_slot()], 2.5);
  EXPECT_EQ(v[layout.grad_norm_slot()], 3.25);
  EXPECT_EQ(v[layout.scale_slot()], 65536.0);
  EXPECT_EQ(v[layout.found_inf_slot()], 1.0);

  const StepHostValues d = layout.decode(host);
  EXPECT_EQ(d.loss, 2.5);
  EXPECT_EQ(d.stop, -1);
  EXPECT_EQ(d.grad_norm, 3.25);
  EXPECT_EQ(d.scale, 65536.0);
  EXPECT_TRUE(d.found_inf);
}

TEST(StepValues, OneRankWithoutAScalerDecodesScaleOneAndNoInf) {
  const StepValues layout({.world_size = 1, .scaler = false});
  StepValues::Builder record(layout, kCPU);
  record.loss(f64_scalar(0.75), -1);
  record.grad_norm(f64_scalar(std::numeric_limits<double>::infinity()));
  HostCopy copy = std::move(record).start_copy();
  const StepHostValues d = layout.decode(copy.wait());
  EXPECT_EQ(d.loss, 0.75);
  EXPECT_EQ(d.grad_norm, std::numeric_limits<double>::infinity());
  EXPECT_EQ(d.scale, 1.0);
  EXPECT_FALSE(d.found_inf);
  EXPECT_EQ(d.stop, -1);
}

TEST(StepValues, SeveralRanksRoundTripThroughTheSumOfTheirLossSlots) {
  const StepValues layout({.world_size = 3, .scaler = true});
  const std::vector<double> losses = {1.0, 2.0, 4.5};
  const std::vector<int> votes = {SIGTERM, -1, SIGTERM};
  std::vector<StepValues::Builder> records;
  std::vector<Tensor> slots;
  for (size_t r = 0; r < losses.size(); ++r) {
    records.emplace_back(layout, kCPU);
    slots.push_back(records[r].loss(f64_scalar(losses[r]), votes[r]));
    ASSERT_EQ(slots[r].numel(), 1 + kStopSlots);
  }
  // The ranks' all-reduce (ReduceOp::kSum), in place in every rank's record.
  Tensor sum = add(add(slots[0], slots[1]), slots[2]);
  for (const Tensor& s : slots) copy_(s, sum);
  for (size_t r = 0; r < records.size(); ++r) {
    records[r].grad_norm(f64_scalar(0.5));
    records[r].scaler(f64_scalar(1024.0), full({}, 0.0));
    HostCopy copy = std::move(records[r]).start_copy();
    const Tensor& host = copy.wait();
    EXPECT_EQ(host.data<double>()[layout.stop_slot(SIGTERM)], 2.0) << "rank " << r;
    EXPECT_EQ(host.data<double>()[layout.stop_slot(0)], 0.0) << "rank " << r;
    const StepHostValues d = layout.decode(host);
    EXPECT_EQ(d.loss, (1.0 + 2.0 + 4.5) / 3) << "rank " << r;
    EXPECT_EQ(d.stop, SIGTERM) << "rank " << r;
    EXPECT_EQ(d.grad_norm, 0.5) << "rank " << r;
    EXPECT_EQ(d.scale, 1024.0) << "rank " << r;
    EXPECT_FALSE(d.found_inf) << "rank " << r;
  }
}

TEST(StepValues, TheStopIsWhatMostRanksVotedForASignalBeforeAPlainRequestOnATie) {
  const StepValues layout({.world_size = 4, .scaler = false});
  EXPECT_EQ(layout.decode(record_of(layout, {})).stop, -1);
  // Three plain requests against one SIGTERM: the plain request.
  EXPECT_EQ(layout.decode(record_of(layout, {{layout.stop_slot(0), 3}, {layout.stop_slot(SIGTERM), 1}})).stop, 0);
  // As many of each: the signal.
  EXPECT_EQ(layout.decode(record_of(layout, {{layout.stop_slot(0), 2}, {layout.stop_slot(SIGTERM), 2}})).stop, SIGTERM);
  // Two signals as often: the lower signal number.
  EXPECT_EQ(layout.decode(record_of(layout, {{layout.stop_slot(SIGINT), 1}, {layout.stop_slot(SIGTERM), 1}})).stop,
            SIGINT);
  EXPECT_EQ(layout.decode(record_of(layout, {{layout.stop_slot(SIGUSR1), 3}, {layout.stop_slot(SIGINT), 1}})).stop,
            SIGUSR1);
}

TEST(StepValues, DecodeRefusesARecordOfAnotherLayout) {
  const StepValues one_rank({.world_size = 1, .scaler = true});
  const StepValues two_ranks({.world_size = 2, .scaler = true});
  EXPECT_THROW(two_ranks.decode(record_of(one_rank, {})), Error);
  EXPECT_THROW(one_rank.decode(full({4}, 0.0)), Error);  // f32
}

}  // namespace
}  // namespace mantissa

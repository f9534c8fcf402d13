// The Trainer in fp16 on N ranks, the last rank's loss blown up to overflow the f16 backward at one step:
// every rank's step callback must report that step skipped with the same scale before and after, the
// same (rank-averaged) losses at every step, and the replicas must end with identical weights. Then a stop
// requested on the last rank alone must stop every rank after the same step, with that rank's reason; and
// where ranks must agree (ranks_disagree, fields_disagree), a rank that differs is found, and uneven loaders
// and differing models (DDP) are refused.
#include "tests/dist/trainer_dist.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "framework/error.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "optim/sgd.h"
#include "train/ddp.h"
#include "train/rank_agreement.h"
#include "train/trainer.h"

namespace mantissa {
namespace {

constexpr int64_t kSteps = 8, kOverflowStep = 3;  // steps count from 1

}  // namespace

int run_trainer_checks(ProcessGroup& pg, int& checks) {
  const int n = pg.size(), r = pg.rank();
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    ++checks;
    if (ok) return;
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED trainer: %s\n", r, what.c_str());
  };
  Generator gdata(7);  // the same dataset on every rank; the loader shards it
  const int64_t rows = 16 * n * kSteps;
  const Tensor x = randn({rows, 6}, {}, &gdata);
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (int64_t& y : labels) y = static_cast<int64_t>(gdata.next_u32() % 3);
  auto data = std::make_shared<TensorDataset>(std::vector<Tensor>{x, from_vector(labels, {rows})});
  DataLoader train(data,
                   {.batch_size = 16, .shuffle = Shuffle::kRandom, .seed = 3, .shard = {.rank = r, .world_size = n}});

  Generator ginit(9 + static_cast<uint64_t>(r));  // other weights per rank: the Trainer broadcasts rank 0's
  MLP model(6, {32}, 3, {.generator = &ginit});
  SGD sgd(model.named_parameters(), {.lr = 0.05, .momentum = 0.9});
  Task task = classification_task([&](const Tensor& in) { return model.forward(in); });
  int64_t calls = 0;
  Task blown = task;
  blown.loss = [&](const Example& batch) {
    const Tensor loss = task.loss(batch);
    // 1e30 * 65536 is finite in f32, but the f16 backward of the last layer overflows to inf.
    return ++calls == kOverflowStep && r == n - 1 ? mul(loss, 1e30) : loss;
  };
  Trainer trainer({.precision = Precision::kF16,
                   .max_steps = kSteps,
                   .scaler = amp::GradScalerOptions{.init_scale = 1024},
                   .warmup_steps = 0,
                   .process_group = &pg,
                   // The values a GPU run reads a step late (mantissa-train's DDP runs cover lag 0).
                   .step_read_lag = 1},
                  model, blown, sgd, train);
  std::vector<double> losses, scales, skipped;
  trainer.on_step_end([&](const StepMetrics& m) {
    losses.push_back(m.loss);
    scales.push_back(m.scale);
    skipped.push_back(m.skipped ? 1 : 0);
  });
  const absl::StatusOr<RunSummary> summary = trainer.fit();
  expect(summary.ok(), summary.ok() ? "" : std::string(summary.status().message()));
  if (!summary.ok()) return failures;
  expect(static_cast<int64_t>(skipped.size()) == kSteps, detail::cat(skipped.size(), " steps"));
  for (int64_t s = 0; s < static_cast<int64_t>(skipped.size()); ++s) {
    expect(skipped[s] == (s + 1 == kOverflowStep ? 1 : 0), detail::cat("step ", s + 1, " skipped ", skipped[s]));
  }
  expect(summary->skipped_steps == 1 && summary->final_scale == 512,
         detail::cat("skipped ", summary->skipped_steps, ", final scale ", summary->final_scale, " (want 1, 512)"));
  // Every rank reports the same numbers: the losses (rank-averaged), the scales, and holds the same weights.
  for (const std::vector<double>* v : {&losses, &scales}) {
    const Tensor all = pg.all_gather(from_vector(*v));
    for (int q = 1; q < n; ++q) {
      expect(std::memcmp(all.select(0, q).data_ptr(), all.select(0, 0).data_ptr(), all.select(0, 0).nbytes()) == 0,
             detail::cat("rank ", q, " reports other ", v == &losses ? "losses" : "scales", " than rank 0"));
    }
  }
  for (const NamedTensor& p : model.named_parameters()) {
    const Tensor all = pg.all_gather(p.tensor.detach());
    for (int q = 1; q < n; ++q) {
      expect(std::memcmp(all.select(0, q).data_ptr(), all.select(0, 0).data_ptr(), p.tensor.nbytes()) == 0,
             detail::cat(p.name, ": rank ", q, " holds other weights than rank 0"));
    }
  }
  // A stop requested on the last rank after step kStopAt (from its step callback, i.e. after that step's
  // vote) is voted in step kStopAt + 1 + lag (the first enqueued after the callback) and read lag steps
  // later: every rank must stop after step kStopAt + 1 + 2 lag, with SIGUSR1 as the reason (one process
  // reads its own request: kStopAt + 1 + lag).
  constexpr int64_t kStopAt = 3;
  for (const int64_t lag : {0, 1}) {
    const int64_t want = kStopAt + 1 + (n > 1 ? 2 : 1) * lag;
    // Its own model, optimizer and loader: DDP hooks into the parameters of the model it is given.
    DataLoader train2(
        data, {.batch_size = 16, .shuffle = Shuffle::kRandom, .seed = 3, .shard = {.rank = r, .world_size = n}});
    MLP model2(6, {32}, 3, {.generator = &ginit});
    SGD sgd2(model2.named_parameters(), {.lr = 0.05});
    Task task2 = classification_task([&](const Tensor& in) { return model2.forward(in); });
    Trainer again({.precision = Precision::kF16, .max_steps = kSteps, .process_group = &pg, .step_read_lag = lag},
                  model2, task2, sgd2, train2);
    again.on_step_end([&](const StepMetrics& m) {
      if (r == n - 1 && m.step == kStopAt) again.request_stop(SIGUSR1);
    });
    const absl::StatusOr<RunSummary> stopped = again.fit();
    expect(stopped.ok(), stopped.ok() ? "" : std::string(stopped.status().message()));
    if (!stopped.ok()) return failures;
    expect(stopped->stopped.has_value() && stopped->stopped->step == want && again.step() == want &&
               stopped->stopped->signal == SIGUSR1,
           detail::cat("step_read_lag ", lag, ": a stop requested on rank ", n - 1, " after step ", kStopAt,
                       ": this rank stopped ",
                       stopped->stopped
                           ? detail::cat("after step ", stopped->stopped->step, " by signal ", stopped->stopped->signal)
                           : std::string("never"),
                       " (want after step ", want, " by SIGUSR1)"));
  }
  // Where the ranks must agree, ranks_disagree gives every rank the first one that differs from rank 0; a
  // Trainer whose ranks' loaders have different batches per epoch is refused on every rank (before DDP's
  // first collective, so no rank is left waiting).
  const std::optional<RankDisagreement> agree = ranks_disagree(pg, 42);
  expect(!agree.has_value(), detail::cat("ranks_disagree: every rank holds 42, but rank ", agree ? agree->rank : -1,
                                         " was found to differ"));
  const std::optional<RankDisagreement> differ = ranks_disagree(pg, n > 1 && r == n - 1 ? 7 : 5);
  expect(
      n == 1 ? !differ.has_value()
             : differ.has_value() && differ->rank == n - 1 && differ->value == 7 && differ->rank0_value == 5,
      detail::cat("ranks_disagree: the last rank holds 7, the others 5: found ",
                  differ ? detail::cat("rank ", differ->rank, " with ", differ->value, " against ", differ->rank0_value)
                         : std::string("none")));
  if (n > 1) {
    const int64_t batch = r == n - 1 ? 8 : 16;
    DataLoader uneven(
        data, {.batch_size = batch, .shuffle = Shuffle::kRandom, .seed = 3, .shard = {.rank = r, .world_size = n}});
    MLP model3(6, {32}, 3, {.generator = &ginit});
    SGD sgd3(model3.named_parameters(), {.lr = 0.05});
    Task task3 = classification_task([&](const Tensor& in) { return model3.forward(in); });
    std::string error;
    try {
      Trainer refused({.precision = Precision::kF32, .max_steps = 1, .process_group = &pg}, model3, task3, sgd3,
                      uneven);
    } catch (const Error& e) {
      error = e.what();
    }
    const std::string want = detail::cat("Trainer: rank ", n - 1, "'s training loader has ", 2 * kSteps,
                                         " batches per epoch, rank 0's has ", kSteps, ". HINT:");
    expect(error.find(want) != std::string::npos,
           detail::cat("loaders of ", kSteps, " and ", 2 * kSteps, " batches: the Trainer said '", error, "'"));
  }
  // fields_disagree names the first field that differs and who holds what; all_gather_text gives every
  // rank's text (of different lengths); DDP refuses ranks whose models differ, on every rank, naming the
  // parameter (issue 34).
  const std::vector<Field> same = {{"lr", "0.1"}, {"seed", "1"}};
  expect(!fields_disagree(pg, same).has_value(), "fields_disagree: every rank holds the same fields");
  const std::vector<Field> mine = {{"lr", "0.1"}, {"seed", r == n - 1 ? "2" : "1"}};
  const std::optional<FieldDisagreement> field = fields_disagree(pg, mine);
  const std::string want_field =
      n == 1 ? std::string("none")
             : detail::cat("seed: 1 on ", n == 2 ? "rank 0" : "ranks 0, 1", ", 2 on rank ", n - 1);
  const std::string got_field = field ? detail::cat(field->name, ": ", field->describe()) : std::string("none");
  expect(got_field == want_field, detail::cat("fields_disagree: want '", want_field, "', got '", got_field, "'"));
  const std::vector<std::string> texts = all_gather_text(pg, std::string(static_cast<size_t>(r), 'x'));
  bool texts_ok = static_cast<int>(texts.size()) == n;
  for (int q = 0; texts_ok && q < n; ++q) texts_ok = texts[q] == std::string(static_cast<size_t>(q), 'x');
  expect(texts_ok, "all_gather_text: rank q's text is q x's");
  if (n > 1) {
    MLP other(6, {r == n - 1 ? 16 : 32}, 3, {.generator = &ginit});
    std::string error;
    try {
      DistributedDataParallel refused(other, pg);
    } catch (const Error& e) {
      error = e.what();
    }
    const std::string want = detail::cat("DistributedDataParallel: the ranks' models differ: parameter '",
                                         other.named_parameters().front().name, "': [32, 6] f32 on ",
                                         n == 2 ? "rank 0" : "ranks 0, 1", ", [16, 6] f32 on rank ", n - 1, ". HINT:");
    expect(error.find(want) != std::string::npos,
           detail::cat("DDP of MLPs 6-32-3 and 6-16-3: want '", want, "...', got '", error, "'"));
  }
  // Trainer::resume where the last rank cannot read its file: every rank fails and none waits for a
  // collective the others never make; the others name that rank (its own error says why).
  if (n > 1) {
    const std::string path =
        (std::filesystem::temp_directory_path() / detail::cat("trainer_dist_", getpid(), "_rank", r, ".h5")).string();
    const absl::Status saved = trainer.save_checkpoint(path);
    expect(saved.ok(), detail::cat("save_checkpoint: ", saved.message()));
    DataLoader train4(
        data, {.batch_size = 16, .shuffle = Shuffle::kRandom, .seed = 3, .shard = {.rank = r, .world_size = n}});
    MLP model4(6, {32}, 3, {.generator = &ginit});
    SGD sgd4(model4.named_parameters(), {.lr = 0.05, .momentum = 0.9});
    Task task4 = classification_task([&](const Tensor& in) { return model4.forward(in); });
    Trainer resumed({.precision = Precision::kF16, .max_steps = kSteps, .process_group = &pg}, model4, task4, sgd4,
                    train4);
    const absl::Status s = resumed.resume(r == n - 1 ? path + ".missing" : path);
    const std::string want =
        r == n - 1 ? std::string("no such file") : detail::cat("rank ", n - 1, " cannot restore its checkpoint");
    expect(!s.ok() && std::string(s.message()).find(want) != std::string::npos,
           detail::cat("resume with rank ", n - 1, "'s file missing: want an error with '", want, "', got '",
                       s.message(), "'"));
    std::filesystem::remove(path);
  }
  if (r == 0) {
    std::printf(
        "trainer: %d ranks, fp16, the last rank overflowing at step %lld: skipped on every rank, final "
        "scale %g, identical losses, scales and weights; a stop requested on rank %d stopped every rank after step "
        "%lld (%lld with step_read_lag 1)\n",
        n, static_cast<long long>(kOverflowStep), summary->final_scale, n - 1, static_cast<long long>(kStopAt + 1),
        static_cast<long long>(kStopAt + 1 + (n > 1 ? 2 : 1)));
  }
  return failures;
}

}  // namespace mantissa

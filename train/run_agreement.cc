// Under mpirun, what the ranks of mantissa-train agree on before their first collective (train/run.cc calls
// these first thing): the flags they were started with, the point the run starts from (--resume), and the
// model's parameters. Without them a rank with another --mlp_hidden, another --precision or no checkpoint
// to resume met the others in different collectives: MPI errors naming neither side, a crash ("double free
// or corruption"), a hang until --dist_timeout, or replicas that silently diverged (another --lr). A
// disagreement is an agreed error (train/rank_agreement.h): the same one line on every rank, printed once.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "framework/tensor.h"
#include "train/checkpoint.h"
#include "train/rank_agreement.h"
#include "train/run_flags.h"
#include "train/run_parts.h"
#include "train/trainer.h"

namespace mantissa::run_parts {
namespace {

std::string quoted(const std::string& value) { return value.empty() ? "\"\"" : value; }

std::string ranks_text(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

// What agree_on_resume gathers: a fresh start, or an error reading the checkpoint; else the step.
constexpr int64_t kFresh = -1, kUnreadable = std::numeric_limits<int64_t>::min();

}  // namespace

absl::Status agree_on_flags(ProcessGroup& group, const RunOptions& options) {
  if (group.size() == 1) return absl::OkStatus();
  RunOptions o = options;
  o.data = effective_data(options);  // the default and its name are the same data
  std::vector<Field> fields;
  std::vector<std::string> may_differ;
  for (const FlagInfo& f : flag_infos(o)) {
    if (f.across_ranks == AcrossRanks::kSame) {
      fields.push_back({f.name, f.value});
    } else {
      may_differ.push_back("--" + f.name);
    }
  }
  // --device may name each rank's own GPU, but its kind decides the collectives a rank makes (NCCL's).
  fields.push_back({"device", options.device == "cpu" ? "cpu" : "cuda (cuda:N, any N)"});
  const std::optional<FieldDisagreement> d = fields_disagree(group, fields);
  if (!d) return absl::OkStatus();
  return agreed_error(absl::InvalidArgumentError(absl::StrCat(
      "--", d->name, " differs between the ranks: ", d->describe(quoted),
      ". HINT: start every rank with the same flags (these may differ: ", absl::StrJoin(may_differ, ", "), ")")));
}

absl::StatusOr<ResumePoint> agree_on_resume(ProcessGroup& group, const RunOptions& o) {
  // This rank's answer, from its own files. --resume=auto: the latest checkpoint when the folder has a
  // `latest` file (a job that was stopped; one that names a missing file is an error, not a fresh start),
  // else a fresh run.
  ResumePoint point;
  absl::Status error;
  std::string seen = absl::StrCat("starts afresh (--resume=", quoted(o.resume), ")");
  std::string resume = o.resume;
  if (resume == "auto") {
    std::error_code ec;
    resume = std::filesystem::exists(std::filesystem::path(o.checkpoint_dir) / "latest", ec) ? "latest" : "";
    if (resume.empty()) seen = absl::StrCat("starts afresh: no checkpoint in ", o.checkpoint_dir, " (--resume=auto)");
  }
  if (!resume.empty()) {
    absl::StatusOr<std::string> path = resolve_resume(resume, o.checkpoint_dir);
    absl::StatusOr<Checkpoint> checkpoint = path.ok() ? load_checkpoint(*path) : path.status();
    if (checkpoint.ok()) {
      seen = absl::StrCat("resumes at step ", checkpoint->trainer.step, " from ", *path, " (--resume=", o.resume, ")");
      point = {.checkpoint = std::move(*checkpoint), .path = *path};
    } else {
      error = checkpoint.status();
      seen = absl::StrCat("cannot resume: ", error.message());
    }
  }
  if (group.size() == 1) {
    if (!error.ok()) return error;
    return point;
  }
  const int64_t key = !error.ok() ? kUnreadable : point.checkpoint ? point.checkpoint->trainer.step : kFresh;
  const Tensor keys = group.all_gather(from_vector(std::vector<int64_t>{key})).contiguous();
  const int64_t* all = keys.data<int64_t>();
  bool agree = true;
  for (int r = 0; r < group.size(); ++r) agree = agree && all[r] == all[0] && all[r] != kUnreadable;
  if (agree) return point;
  // Who saw what, in groups of ranks that start from the same point (errors grouped by their text).
  const std::vector<std::string> texts = all_gather_text(group, seen);
  std::map<std::pair<int64_t, std::string>, std::vector<int>> groups;
  std::vector<std::pair<int64_t, std::string>> order;
  bool unreadable = false;
  for (int r = 0; r < group.size(); ++r) {
    const std::pair<int64_t, std::string> k{all[r], all[r] == kUnreadable ? texts[r] : std::string()};
    if (!groups.contains(k)) order.push_back(k);
    groups[k].push_back(r);
    unreadable = unreadable || all[r] == kUnreadable;
  }
  // Ranks that cannot read their checkpoint first: they are what fails.
  std::stable_partition(order.begin(), order.end(), [](const auto& k) { return k.first == kUnreadable; });
  std::vector<std::string> parts;
  for (const auto& k : order) {
    const std::vector<int>& ranks = groups[k];
    parts.push_back(absl::StrCat(ranks_text(ranks), " ", texts[ranks.front()]));
  }
  const std::string what = absl::StrJoin(parts, "; ");
  // A checkpoint that cannot be read fails the run (status 1), as with one process; ranks that see
  // different checkpoints are a set-up to fix (status 2).
  if (unreadable) return agreed_error(absl::FailedPreconditionError(what));
  return agreed_error(absl::InvalidArgumentError(absl::StrCat(
      "the ranks would not start from the same point: ", what,
      ". HINT: every rank must see the same checkpoints: a shared --checkpoint_dir, or a copy on every machine")));
}

absl::StatusOr<int64_t> batch_size_per_rank(const RunOptions& o, int world, const Checkpoint* checkpoint,
                                            const std::string& path) {
  // A file from before the global batch was recorded is taken as written by this run's (train/trainer.h).
  const std::optional<GlobalBatch> written = checkpoint ? checkpoint->trainer.global_batch : std::nullopt;
  const std::string accum = o.grad_accum == 1 ? "" : absl::StrCat(" x --grad_accum=", o.grad_accum);
  const std::string ranks = absl::StrCat(world, world == 1 ? " rank" : " ranks");
  if (!written) {
    if (o.global_batch == 0) return o.batch_size;
    if (o.global_batch % (world * o.grad_accum) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--global_batch=", o.global_batch, " does not split evenly over ",
                                                     ranks, accum, " (it must be a multiple of ", world * o.grad_accum,
                                                     ")"));
    }
    return o.global_batch / (world * o.grad_accum);
  }
  const std::string kept = absl::StrCat("checkpoint ", path, " was written by ", describe(*written));
  if (o.global_batch > 0 && o.global_batch != written->samples()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global_batch=", o.global_batch, ": ", kept, " (the global batch is kept across a resume)"));
  }
  const absl::StatusOr<int64_t> fits = mantissa::resume_batch_size(*written, world, o.grad_accum);
  if (!fits.ok())
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " was ", fits.status().message()));
  if (o.global_batch > 0 || o.batch_size == *fits) return *fits;
  return absl::InvalidArgumentError(absl::StrCat(
      "--batch_size=", o.batch_size, ": ", kept, "; ", ranks, accum, world == 1 ? " needs" : " need",
      " --batch_size=", *fits, " (the global batch is kept across a resume; --global_batch=", written->samples(),
      " splits itself over any number of ranks)"));
}

absl::Status agree_on_model(ProcessGroup& group, Module& model) {
  if (group.size() == 1) return absl::OkStatus();
  const std::optional<std::string> d = parameters_disagree(group, model.named_parameters());
  if (!d) return absl::OkStatus();
  return agreed_error(absl::InvalidArgumentError(absl::StrCat(
      *d, ". HINT: the flags agree, so the data differs (the GPT's vocabulary comes from the text it reads)")));
}

}  // namespace mantissa::run_parts

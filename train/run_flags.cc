// mantissa-train's flag table (for_each_flag: one line per flag) and what is made from it: --help, parsing,
// range checks and the config JSON (read back in run_flags_json.cc).
#include "train/run_flags.h"

#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "train/precision.h"

namespace mantissa {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The values a number flag accepts (for a list: each entry): finite, and lo < v or lo <= v, v < hi or v <= hi.
enum class Edge { kOpen, kClosed };
struct Range {
  double lo = -kInf;
  Edge lo_edge = Edge::kOpen;
  double hi = kInf;
  Edge hi_edge = Edge::kOpen;
};
// above(0): > 0, at_least(0): >= 0, open(0, 1): (0, 1), half_open(0, 1): [0, 1).
constexpr Range above(double lo) { return {.lo = lo}; }
constexpr Range at_least(double lo) { return {.lo = lo, .lo_edge = Edge::kClosed}; }
constexpr Range open(double lo, double hi) { return {.lo = lo, .hi = hi}; }
constexpr Range half_open(double lo, double hi) { return {.lo = lo, .lo_edge = Edge::kClosed, .hi = hi}; }

// What a table line may add after the flag's name and help.
struct Rules {
  std::optional<Range> range;  // none: any value (or validate() checks it against another flag)
  const char* note = "";       // said after the range when a value is refused, e.g. "(0: off)"
  InConfig in_config = InConfig::kYes;
  AcrossRanks across_ranks = AcrossRanks::kSame;  // every kMayDiffer line says why it may
};

struct Flag {
  const char* name;
  const char* help;
  Rules rules;
};

// The table: every flag once, in --help's order, with the RunOptions field it sets. The field gives the flag
// its type and its default (RunOptions{}); the line, its name, help, range, whether the config JSON records
// it and whether ranks under mpirun may hold different values (the others are checked to be the same before
// the first collective: differing models or hyperparameters crash MPI, hang, or train diverged replicas). Written as a
// function that hands each (flag, field) to `visit` rather than as an array of member pointers: the fields differ in
// type (integers, doubles, text, enums, a list, an optional) and some are nested (scaler.*), and each use (parse,
// print, check, JSON) is then one generic lambda with an overload per field type, with no variant and no casts.
// `Options` is RunOptions or const RunOptions.
template <typename Options, typename Visit>
void for_each_flag(Options& o, Visit&& visit) {
  using enum InConfig;
  using enum AcrossRanks;
  auto flag = [&](auto& field, const char* name, const char* help, Rules rules = {}) {
    visit(Flag{name, help, rules}, field);
  };
  flag(o.model, "model", "model: mlp | cnn | gpt");
  flag(o.data, "data",
       "data: fashion-mnist | text | synthetic (random inputs, no I/O) (default: fashion-mnist; text for --model=gpt)");
  // Where this machine keeps the data, so it may differ; what is read is checked elsewhere: the loaders'
  // batches per epoch, and the GPT's vocabulary through its embedding's shape.
  flag(o.data_path, "data_path",
       "folder of the IDX files, or text file/folder (default: Debian's /usr/share/datasets/fashion-mnist or "
       "/usr/share/games/fortunes)",
       {.across_ranks = kMayDiffer});
  flag(o.mlp_hidden, "mlp_hidden", "MLP hidden sizes, comma-separated", {.range = above(0)});
  flag(o.n_layer, "n_layer", "GPT: transformer blocks", {.range = above(0)});
  flag(o.n_head, "n_head", "GPT: attention heads", {.range = above(0)});
  flag(o.n_embd, "n_embd", "GPT: embedding width", {.range = above(0)});  // a multiple of n_head: validate()
  flag(o.block_size, "block_size", "GPT: context length in characters", {.range = above(0)});
  flag(o.dropout, "dropout", "GPT: dropout probability", {.range = half_open(0, 1)});
  // Only the CNN has BatchNorm: validate() checks it.
  flag(o.batchnorm, "batchnorm",
       "CNN under mpirun: BatchNorm statistics of each rank's batch (local) or of the global batch of all ranks "
       "(sync: SyncBatchNorm)");
  // The same gradients either way, so a resumed run may change it: not part of the config. DDP launches its
  // buckets in a fixed order whatever order backward fills them in, so a rank short of memory may recompute
  // alone.
  flag(o.recompute, "recompute",
       "GPT: activation checkpointing: none | blocks (each block keeps only its input and runs again in "
       "backward: less memory, one more forward)",
       {.in_config = kNo, .across_ranks = kMayDiffer});
  flag(o.precision, "precision",
       "fp32 | fp16 (autocast + loss scaling) | bf16 (autocast) | fp8 (FP8 linears: E4M3 forward, E5M2 gradients, "
       "per-tensor scales; bf16 autocast elsewhere)");
  // Its form: validate() checks it (amp::parse_fp8_recipe).
  flag(o.fp8_recipe, "fp8_recipe",
       "fp8: how the scales are chosen: delayed (amax history of 16 steps, its max, margin 0) | dynamic (each "
       "tensor's own amax) | delayed:history=N,algo=max|most_recent,margin=M | per row or block along each GEMM's "
       "K: rowwise (torchao's) | blockwise (DeepSeek-V3's 1x128 and 128x128) | mxfp8 (32, E8M0 scales; "
       "scale=floor|rceil) | nvfp4 (E2M1 in 16s, E4M3 scales; sr, hadamard, weight_2d) | mxfp4 (E2M1 in 32s): "
       "docs/fp8.md");
  flag(o.fp8_accumulator, "fp8_accumulator",
       "fp8 on the CPU: how the FP8 GEMMs sum their products: f32 (full f32, a best case) | hopper (as Hopper's FP8 "
       "tensor core through cuBLASLt, bit for bit: 14-bit partial sums promoted to f32 every 128 products) | "
       "hopper-fast (the same without promotion: cuBLASLt's fast accumulation). On a GPU the tensor core sums");
  flag(o.optimizer, "optimizer", "sgd | adam | adamw | lion (lion: try a 3-10x smaller --lr than adam's)");
  flag(o.master_weights, "master_weights",
       "fp32 (the optimizer updates fp32 master weights) | none (the weights are bf16, updated in place: needs "
       "--precision=bf16 or fp8; docs/precision_ladder.md)");
  flag(o.update_rounding, "update_rounding",
       "with --master_weights=none, how an update rounds into the bf16 weights: nearest (stalls on small updates) | "
       "stochastic (unbiased, a Philox stream per parameter from --seed) | kahan (a bf16 compensation buffer)");
  flag(o.optimizer_state, "optimizer_state",
       "how the optimizer's moments are stored: fp32 | bf16 | 8bit (block-wise: 2048 values per f32 absmax, "
       "Dettmers et al.'s dynamic map)");
  flag(o.lr, "lr", "learning rate", {.range = above(0)});
  flag(o.momentum, "momentum", "SGD momentum", {.range = half_open(0, 1)});
  flag(o.weight_decay, "weight_decay", "weight decay (default: 0; 0.01 for adamw)", {.range = at_least(0)});
  flag(o.batch_size, "batch_size", "examples per micro-batch on each rank (gpt: 32 unless given)", {.range = above(0)});
  // Split in run() over the ranks and --grad_accum, where the ranks are known (train/run_agreement.cc).
  flag(o.global_batch, "global_batch",
       "examples per optimizer step over all ranks, instead of --batch_size (which becomes this / (ranks x "
       "--grad_accum)); 0: off. A resumed run keeps its checkpoint's global batch on any number of ranks: with "
       "this flag it splits itself, with --batch_size that must fit",
       {.range = at_least(0), .note = "(0: off)"});
  flag(o.epochs, "epochs", "passes over the training data (gpt: the run ends at --max_steps)", {.range = at_least(0)});
  flag(o.max_steps, "max_steps", "optimizer steps from the start of the run, 0: no limit (gpt: 2000)",
       {.range = at_least(0)});
  flag(o.grad_accum, "grad_accum", "micro-batches per optimizer step", {.range = above(0)});
  flag(o.clip_grad_norm, "clip_grad_norm", "clip the total grad L2 norm to this, 0: off",
       {.range = at_least(0), .note = "(0: off)"});
  flag(o.scaler.init_scale, "init_scale", "fp16 loss scaling: initial scale", {.range = above(0)});
  flag(o.scaler.growth_factor, "growth_factor", "fp16 loss scaling: growth factor", {.range = above(1)});
  flag(o.scaler.backoff_factor, "backoff_factor", "fp16 loss scaling: backoff factor", {.range = open(0, 1)});
  flag(o.scaler.growth_interval, "growth_interval", "fp16 loss scaling: clean steps before the scale grows",
       {.range = above(0)});
  flag(o.scaler.hysteresis, "hysteresis", "fp16 loss scaling: overflows in a row before a backoff",
       {.range = above(0)});
  flag(o.scaler.hysteresis_refill, "hysteresis_refill",
       "fp16 loss scaling: what refills --hysteresis: clean_step (each clean step: only overflows in a row back "
       "off) | growth (only a growth of the scale, as Megatron-LM and DeepSpeed's default)");
  // In [0, --init_scale]: validate() checks it.
  flag(o.scaler.min_scale, "min_scale", "fp16 loss scaling: the scale never backs off below this");
  flag(o.seed, "seed", "seed of the initial weights, data order and dropout");
  // Each machine's own cores.
  flag(o.threads, "threads", "CPU threads, 0: all cores",
       {.range = at_least(0), .note = "(0: all cores)", .in_config = kNo, .across_ranks = kMayDiffer});
  flag(o.eval_every, "eval_every", "steps between evaluations, 0: each epoch end (gpt: 200)", {.range = at_least(0)});
  flag(o.eval_batches, "eval_batches", "batches per evaluation, 0: the whole test set (gpt: 20)",
       {.range = at_least(0)});
  // A folder each machine may mount elsewhere or hold its own copy of (rank 0 alone writes); the checkpoint
  // every rank resumes from is agreed apart (train/run_agreement.cc).
  flag(o.checkpoint_dir, "checkpoint_dir", "folder of HDF5 checkpoints step_<N>.h5 (empty: none)",
       {.in_config = kNo, .across_ranks = kMayDiffer});
  flag(o.checkpoint_every, "checkpoint_every", "steps between checkpoints (one is always written at the end)",
       {.range = at_least(0), .in_config = kNo});
  flag(o.keep_checkpoints, "keep_checkpoints", "checkpoints kept in --checkpoint_dir",
       {.range = above(0), .in_config = kNo});
  // Each rank may name its own copy ('latest' and a path to it are the same start); what it resolves to, a
  // fresh start or a step, is agreed apart (train/run_agreement.cc).
  flag(o.resume, "resume",
       "resume from a checkpoint file, 'latest' in --checkpoint_dir, or 'auto' (latest if any, else start)",
       {.in_config = kNo, .across_ranks = kMayDiffer});
  // Output files, which rank 0 alone writes (the same for --tensorboard and its histograms).
  flag(o.metrics, "metrics", "write JSON lines (one per step, per evaluation, and a summary) here",
       {.in_config = kNo, .across_ranks = kMayDiffer});
  flag(o.tensorboard, "tensorboard",
       "write TensorBoard event files here (scalars every step and evaluation, gradient histograms); a resumed run "
       "continues the same curves",
       {.in_config = kNo, .across_ranks = kMayDiffer});
  flag(o.tensorboard_histogram_every, "tensorboard_histogram_every",
       "with --tensorboard: steps between histograms of log2|gradient| and of the gradient values, 0: none",
       {.range = at_least(0), .note = "(0: none)", .in_config = kNo, .across_ranks = kMayDiffer});
  // Each rank profiles its own steps into its own trace, with no collective.
  flag(o.profile, "profile",
       "profile --profile_steps steps after --profile_wait steps: print the per-op table (self and total time, "
       "calls, GFLOP/s, GB/s) and write this Chrome trace (Perfetto, chrome://tracing)",
       {.in_config = kNo, .across_ranks = kMayDiffer});
  flag(o.profile_wait, "profile_wait", "with --profile: steps before the profiled ones",
       {.range = at_least(0), .in_config = kNo, .across_ranks = kMayDiffer});
  flag(o.profile_steps, "profile_steps", "with --profile: steps profiled",
       {.range = above(0), .in_config = kNo, .across_ranks = kMayDiffer});
  flag(o.report, "report",
       "instead of training: 'precision' runs one training batch in fp32, bf16 and fp16 autocast and prints the "
       "per-module dtypes and differences and the fp16 underflow of every gradient (amp/precision_report.h); "
       "'speed' profiles --profile_steps steps after --profile_wait in each precision and says where the time "
       "goes and why mixed precision is or is not faster (train/speed_report.h); 'memory' measures a step's "
       "weights, gradients, optimizer state and activations per precision (train/memory_report.h)",
       {.in_config = kNo});
  flag(o.memory_budget_mib, "memory_budget",
       "with --report=memory: MiB a training step may peak at; the report predicts the largest batch within it "
       "and checks it with a step",
       {.range = at_least(0.0), .in_config = kNo});
  // Output files; the same for --sample_chars and --progress, which rank 0 alone uses.
  flag(o.report_out, "report_out",
       "with --report: precision writes <this>.json and the gradient histogram <this>.png; speed writes "
       "<this>_speed.json and the stacked bars <this>_speed.png",
       {.in_config = kNo, .across_ranks = kMayDiffer});
  flag(o.sample_chars, "sample_chars", "gpt: characters generated after training",
       {.range = at_least(0), .in_config = kNo, .across_ranks = kMayDiffer});
  flag(o.progress, "progress", "auto | bar | lines | none (auto: a bar on a terminal)",
       {.in_config = kNo, .across_ranks = kMayDiffer});
  // Each rank's own patience: the collectives are the same whatever it is.
  flag(o.dist_timeout_s, "dist_timeout",
       "under mpirun: seconds a rank waits for the others in a collective before the job fails",
       {.range = above(0), .in_config = kNo, .across_ranks = kMayDiffer});
  // The check's own all-gathers come before each collective on the ranks that have it: all or none.
  flag(o.collective_check, "collective_check",
       "under mpirun: off | shapes (before every collective the ranks exchange its kind, shape and dtype, and a "
       "mismatch fails every rank naming both sides instead of a hang or an MPI error; one small all-gather more "
       "per collective, for finding what a hang or MPI_ERR_TRUNCATE comes from)",
       {.in_config = kNo});
  // Not in the config: a run resumes with or without it (checkpoints hold the whole state either way).
  flag(o.zero, "zero",
       "under mpirun: 0 (each rank keeps the whole optimizer state) | 1 (ZeRO-1: each rank keeps the state of "
       "its 1/N of the parameters; grads reduce-scattered, updated weights all-gathered; the same results)",
       {.range = half_open(0, 2), .note = "(0 or 1)", .in_config = kNo});
  // cpu, cuda or cuda:N: validate() checks it. Under mpirun each rank may pick its own GPU (cuda:N); the
  // kind, cpu or cuda, is agreed apart (train/run_agreement.cc): a CUDA rank reduces over NCCL.
  flag(o.device, "device", "cpu | cuda | cuda:N: where the model trains (cuda: GPU 0)",
       {.in_config = kNo, .across_ranks = kMayDiffer});
}

// The names of each enum flag's values, in the order error messages list them (precision's are
// train/precision.h's kPrecisionNames, which checkpoints and parse_precision read too).
template <typename E>
struct Choice {
  const char* name;
  E value;
};
constexpr Choice<ModelKind> kModels[] = {{"mlp", ModelKind::kMLP}, {"cnn", ModelKind::kCNN}, {"gpt", ModelKind::kGPT}};
constexpr Choice<DataKind> kData[] = {{"", DataKind::kDefault},  // empty: the model's usual data
                                      {"fashion-mnist", DataKind::kFashionMnist},
                                      {"text", DataKind::kText},
                                      {"synthetic", DataKind::kSynthetic}};
constexpr Choice<OptimizerKind> kOptimizers[] = {{"sgd", OptimizerKind::kSGD},
                                                 {"adam", OptimizerKind::kAdam},
                                                 {"adamw", OptimizerKind::kAdamW},
                                                 {"lion", OptimizerKind::kLion}};
constexpr Choice<MasterWeights> kMasterWeights[] = {{"fp32", MasterWeights::kFp32}, {"none", MasterWeights::kNone}};
constexpr Choice<UpdateRounding> kUpdateRounding[] = {{"nearest", UpdateRounding::kNearest},
                                                      {"stochastic", UpdateRounding::kStochastic},
                                                      {"kahan", UpdateRounding::kKahan}};
constexpr Choice<StateStorage> kStateStorage[] = {
    {"fp32", StateStorage::kFp32}, {"bf16", StateStorage::kBf16}, {"8bit", StateStorage::k8bit}};
constexpr Choice<BatchNormStats> kBatchNorm[] = {{"local", BatchNormStats::kLocal}, {"sync", BatchNormStats::kSync}};
constexpr Choice<amp::HysteresisRefill> kHysteresisRefill[] = {{"clean_step", amp::HysteresisRefill::kOnCleanStep},
                                                               {"growth", amp::HysteresisRefill::kOnGrowth}};
constexpr Choice<RecomputeMode> kRecompute[] = {{"none", RecomputeMode::kNone}, {"blocks", RecomputeMode::kBlocks}};
constexpr Choice<CollectiveCheck> kCollectiveCheck[] = {{"off", CollectiveCheck::kOff},
                                                        {"shapes", CollectiveCheck::kShapes}};
constexpr Choice<ProgressMode> kProgress[] = {{"auto", ProgressMode::kAuto},
                                              {"bar", ProgressMode::kBar},
                                              {"lines", ProgressMode::kLines},
                                              {"none", ProgressMode::kNone}};
std::span<const Choice<ModelKind>> choices(ModelKind) { return kModels; }
std::span<const Choice<DataKind>> choices(DataKind) { return kData; }
std::span<const PrecisionName> choices(Precision) { return kPrecisionNames; }  // train/precision.h
std::span<const Choice<OptimizerKind>> choices(OptimizerKind) { return kOptimizers; }
std::span<const Choice<ProgressMode>> choices(ProgressMode) { return kProgress; }
std::span<const Choice<MasterWeights>> choices(MasterWeights) { return kMasterWeights; }
std::span<const Choice<UpdateRounding>> choices(UpdateRounding) { return kUpdateRounding; }
std::span<const Choice<StateStorage>> choices(StateStorage) { return kStateStorage; }
std::span<const Choice<CollectiveCheck>> choices(CollectiveCheck) { return kCollectiveCheck; }
std::span<const Choice<BatchNormStats>> choices(BatchNormStats) { return kBatchNorm; }
std::span<const Choice<RecomputeMode>> choices(RecomputeMode) { return kRecompute; }
std::span<const Choice<amp::HysteresisRefill>> choices(amp::HysteresisRefill) { return kHysteresisRefill; }

template <typename E>
const char* name_of(E value) {
  for (const auto& c : choices(value)) {
    if (c.value == value) return c.name;
  }
  return "?";
}

template <typename E>
std::vector<std::string> choice_names(const E&) {
  if constexpr (std::is_enum_v<E>) {
    std::vector<std::string> names;
    for (const auto& c : choices(E{})) {
      if (*c.name != '\0') names.push_back(c.name);
    }
    return names;
  } else {
    return {};
  }
}

// parse_value: a flag's text into its field, or what is wrong with the text (the caller names the flag).
absl::Status wrong(absl::string_view why) { return absl::InvalidArgumentError(why); }

absl::Status parse_value(absl::string_view text, std::string& v) {
  v = std::string(text);
  return absl::OkStatus();
}
// Decimal, or hexadecimal after 0x, as absl's flags read integers (--seed=0x5eed).
template <typename Int>
bool parse_integer(absl::string_view text, Int& v) {
  text = absl::StripAsciiWhitespace(text);
  return absl::StartsWithIgnoreCase(text, "0x") ? absl::SimpleHexAtoi(text, &v) : absl::SimpleAtoi(text, &v);
}
absl::Status parse_value(absl::string_view text, int64_t& v) {
  return parse_integer(text, v) ? absl::OkStatus() : wrong("not an integer");
}
absl::Status parse_value(absl::string_view text, uint64_t& v) {
  return parse_integer(text, v) ? absl::OkStatus() : wrong("not an integer >= 0");
}
absl::Status parse_value(absl::string_view text, double& v) {
  return absl::SimpleAtod(text, &v) ? absl::OkStatus() : wrong("not a number");
}
absl::Status parse_value(absl::string_view text, std::optional<double>& v) {  // empty: none
  if (text.empty()) {
    v.reset();
    return absl::OkStatus();
  }
  double d = 0;
  if (absl::Status s = parse_value(text, d); !s.ok()) return s;
  v = d;
  return absl::OkStatus();
}
absl::Status parse_value(absl::string_view text, std::vector<int64_t>& v) {  // "256,128"
  v.clear();
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(part, &n)) return wrong(absl::StrCat("'", part, "' is not an integer"));
    v.push_back(n);
  }
  return absl::OkStatus();
}
template <typename E>
requires std::is_enum_v<E> absl::Status parse_value(absl::string_view text, E& v) {
  for (const auto& c : choices(v)) {
    if (text == c.name) {
      v = c.value;
      return absl::OkStatus();
    }
  }
  return wrong(absl::StrCat("expected ", absl::StrJoin(choice_names(v), " | ")));
}

// flag_text: a field's value as the flag text that sets it (what --help shows as the default).
std::string flag_text(const std::string& v) { return v; }
std::string flag_text(int64_t v) { return absl::StrCat(v); }
std::string flag_text(uint64_t v) { return absl::StrCat(v); }
std::string flag_text(double v) {  // as absl's flags print doubles: 15 digits when they read back exactly
  const std::string short_form = absl::StrFormat("%.15g", v);
  double back = 0;
  return absl::SimpleAtod(short_form, &back) && back == v ? short_form : absl::StrFormat("%.17g", v);
}
std::string flag_text(const std::optional<double>& v) { return v ? flag_text(*v) : ""; }
std::string flag_text(const std::vector<int64_t>& v) { return absl::StrJoin(v, ","); }
template <typename E>
requires std::is_enum_v<E> std::string flag_text(E v) { return name_of(v); }

// json_value: a field's value in the config JSON. Numbers keep every digit (%.17g round-trips a double).
std::string json_string(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}
std::string json_value(const std::string& v) { return json_string(v); }
std::string json_value(int64_t v) { return absl::StrCat(v); }
std::string json_value(uint64_t v) { return absl::StrCat(v); }
std::string json_value(double v) { return absl::StrFormat("%.17g", v); }
std::string json_value(const std::optional<double>& v) { return v ? json_value(*v) : "null"; }
std::string json_value(const std::vector<int64_t>& v) { return absl::StrCat("[", absl::StrJoin(v, ", "), "]"); }
template <typename E>
requires std::is_enum_v<E> std::string json_value(E v) { return json_string(name_of(v)); }

// check_range: whether a number field is in its flag's range; strings and enums have none.
bool in_range(const Range& r, double v) {
  const bool above_lo = r.lo_edge == Edge::kOpen ? v > r.lo : v >= r.lo;
  const bool below_hi = r.hi_edge == Edge::kOpen ? v < r.hi : v <= r.hi;
  return std::isfinite(v) && above_lo && below_hi;
}
std::string range_text(const Range& r) {  // "> 0", ">= 0", "in [0, 1)"
  if (r.hi == kInf) return absl::StrCat(r.lo_edge == Edge::kOpen ? "> " : ">= ", r.lo);
  return absl::StrCat("in ", r.lo_edge == Edge::kOpen ? "(" : "[", r.lo, ", ", r.hi,
                      r.hi_edge == Edge::kOpen ? ")" : "]");
}
std::string must_be(const Flag& f) {
  return absl::StrCat("must be ", range_text(*f.rules.range), *f.rules.note ? " " : "", f.rules.note);
}

template <typename T>
absl::Status check_range(const Flag&, const T&) {
  return absl::OkStatus();
}
template <typename T>
requires std::is_arithmetic_v<T> absl::Status check_range(const Flag& f, const T& v) {
  if (!f.rules.range || in_range(*f.rules.range, static_cast<double>(v))) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", f.name, " ", must_be(f), ", got ", v));
}
absl::Status check_range(const Flag& f, const std::optional<double>& v) {
  return v ? check_range(f, *v) : absl::OkStatus();
}
absl::Status check_range(const Flag& f, const std::vector<int64_t>& v) {  // --mlp_hidden's sizes
  for (int64_t n : v) {
    if (f.rules.range && !in_range(*f.rules.range, static_cast<double>(n))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", f.name, ": every size ", must_be(f), ", got ", absl::StrJoin(v, ",")));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* choice_name(ModelKind model) { return name_of(model); }
const char* choice_name(DataKind data) { return name_of(data); }
const char* choice_name(OptimizerKind optimizer) { return name_of(optimizer); }
const char* choice_name(ProgressMode progress) { return name_of(progress); }
const char* choice_name(CollectiveCheck check) { return name_of(check); }

std::vector<FlagInfo> flag_infos(const RunOptions& options) {
  std::vector<FlagInfo> infos;
  for_each_flag(options, [&](const Flag& f, const auto& v) {
    infos.push_back({.name = f.name,
                     .help = f.help,
                     .value = flag_text(v),
                     .choices = choice_names(v),
                     .in_config = f.rules.in_config,
                     .across_ranks = f.rules.across_ranks});
  });
  return infos;
}

std::string flags_help() {
  std::string out;
  for (const FlagInfo& f : flag_infos()) {
    absl::StrAppendFormat(&out, "  --%-17s %s (default: %s)\n", f.name, f.help, f.value.empty() ? "\"\"" : f.value);
  }
  return out;
}

absl::Status set_flag(RunOptions& options, std::string_view name, std::string_view value) {
  const absl::string_view text(value.data(), value.size());  // absl's string_view is not std's here
  std::optional<absl::Status> result;                        // none: no flag has that name
  for_each_flag(options, [&](const Flag& f, auto& field) {
    if (name != f.name) return;
    absl::Status s = parse_value(text, field);
    result = s.ok() ? s : absl::InvalidArgumentError(absl::StrCat("--", f.name, "=", text, ": ", s.message()));
  });
  return result ? *result : absl::InvalidArgumentError(absl::StrCat("unknown flag --", std::string(name)));
}

absl::Status check_flag_ranges(const RunOptions& options) {
  absl::Status first;
  for_each_flag(options, [&](const Flag& f, const auto& v) {
    if (first.ok()) first = check_range(f, v);
  });
  return first;
}

std::string to_json(const RunOptions& options) {
  RunOptions o = options;
  o.data = effective_data(options);
  std::vector<std::string> fields;
  for_each_flag(std::as_const(o), [&](const Flag& f, const auto& v) {
    if (f.rules.in_config == InConfig::kYes) fields.push_back(absl::StrCat("\"", f.name, "\": ", json_value(v)));
  });
  return absl::StrCat("{", absl::StrJoin(fields, ", "), "}");
}

}  // namespace mantissa

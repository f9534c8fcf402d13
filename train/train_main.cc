// mantissa-train: trains the MLP, CNN or GPT examples from the command line. Flags become RunOptions
// (train/run.h); a bad flag or value exits with status 2 and a one-line reason, a failing run (missing data,
// bad checkpoint) with status 1 and its message. With no flags: the MLP on Fashion-MNIST in fp16.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "framework/error.h"
#include "train/launch.h"
#include "train/run.h"

ABSL_FLAG(std::string, model, "mlp", "model: mlp | cnn | gpt");
ABSL_FLAG(std::string, data, "",
          "data: fashion-mnist | text | synthetic (random inputs, no I/O) "
          "(default: fashion-mnist; text for --model=gpt)");
ABSL_FLAG(std::string, data_path, "",
          "folder of the IDX files, or text file/folder (default: Debian's "
          "/usr/share/datasets/fashion-mnist or /usr/share/games/fortunes)");
ABSL_FLAG(std::string, mlp_hidden, "1024,1024", "MLP hidden sizes, comma-separated");
ABSL_FLAG(int64_t, n_layer, 4, "GPT: transformer blocks");
ABSL_FLAG(int64_t, n_head, 4, "GPT: attention heads");
ABSL_FLAG(int64_t, n_embd, 128, "GPT: embedding width");
ABSL_FLAG(int64_t, block_size, 128, "GPT: context length in characters");
ABSL_FLAG(double, dropout, 0.0, "GPT: dropout probability");
ABSL_FLAG(std::string, precision, "fp16", "fp32 | fp16 (autocast + loss scaling) | bf16 (autocast)");
ABSL_FLAG(std::string, optimizer, "adam", "sgd | adam | adamw");
ABSL_FLAG(double, lr, 1e-3, "learning rate");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum");
ABSL_FLAG(std::string, weight_decay, "", "weight decay (default: 0; 0.01 for adamw)");
ABSL_FLAG(int64_t, batch_size, 128, "examples per micro-batch (gpt: 32 unless given)");
ABSL_FLAG(int64_t, epochs, 5, "passes over the training data (gpt: the run ends at --max_steps)");
ABSL_FLAG(int64_t, max_steps, 0, "optimizer steps from the start of the run, 0: no limit (gpt: 2000)");
ABSL_FLAG(int64_t, grad_accum, 1, "micro-batches per optimizer step");
ABSL_FLAG(double, clip_grad_norm, 0.0, "clip the total grad L2 norm to this, 0: off");
ABSL_FLAG(double, init_scale, 65536.0, "fp16 loss scaling: initial scale");
ABSL_FLAG(double, growth_factor, 2.0, "fp16 loss scaling: growth factor");
ABSL_FLAG(double, backoff_factor, 0.5, "fp16 loss scaling: backoff factor");
ABSL_FLAG(int64_t, growth_interval, 2000, "fp16 loss scaling: clean steps before the scale grows");
ABSL_FLAG(int64_t, hysteresis, 1, "fp16 loss scaling: overflows in a row before a backoff");
ABSL_FLAG(double, min_scale, 0.0, "fp16 loss scaling: the scale never backs off below this");
ABSL_FLAG(uint64_t, seed, 1, "seed of the initial weights, data order and dropout");
ABSL_FLAG(std::string, device, "cpu", "cpu | cuda | cuda:N: where the model trains (cuda: GPU 0)");
ABSL_FLAG(int64_t, threads, 0, "CPU threads, 0: all cores");
ABSL_FLAG(int64_t, eval_every, 0, "steps between evaluations, 0: each epoch end (gpt: 200)");
ABSL_FLAG(int64_t, eval_batches, 0, "batches per evaluation, 0: the whole test set (gpt: 20)");
ABSL_FLAG(std::string, checkpoint_dir, "", "folder of HDF5 checkpoints step_<N>.h5 (empty: none)");
ABSL_FLAG(int64_t, checkpoint_every, 0, "steps between checkpoints (one is always written at the end)");
ABSL_FLAG(int64_t, keep_checkpoints, 3, "checkpoints kept in --checkpoint_dir");
ABSL_FLAG(std::string, resume, "", "resume from a checkpoint file, or 'latest' in --checkpoint_dir");
ABSL_FLAG(std::string, metrics, "", "write JSON lines (one per step, per evaluation, and a summary) here");
ABSL_FLAG(int64_t, sample_chars, 400, "gpt: characters generated after training");
ABSL_FLAG(std::string, progress, "auto", "auto | bar | lines | none (auto: a bar on a terminal)");
ABSL_FLAG(int64_t, dist_timeout, 1800,
          "under mpirun: seconds a rank waits for the others in a collective before the job fails");

namespace mantissa {
namespace {

// Every flag, in the order --help lists them.
constexpr const char* kFlags[] = {"model",         "data",           "data_path",        "mlp_hidden",
                                  "n_layer",       "n_head",         "n_embd",           "block_size",
                                  "dropout",       "precision",      "optimizer",        "lr",
                                  "momentum",      "weight_decay",   "batch_size",       "epochs",
                                  "max_steps",     "grad_accum",     "clip_grad_norm",   "init_scale",
                                  "growth_factor", "backoff_factor", "growth_interval",  "hysteresis",
                                  "min_scale",     "seed",           "threads",          "eval_every",
                                  "eval_batches",  "checkpoint_dir", "checkpoint_every", "keep_checkpoints",
                                  "resume",        "metrics",        "sample_chars",     "progress",
                                  "dist_timeout",  "device"};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "mantissa-train: %s (see --help)\n", message.c_str());
  std::exit(2);
}

void print_help() {
  std::printf(
      "usage: mantissa-train [--flag=value ...]\n"
      "Trains an example model. With no flags: the MLP on Fashion-MNIST in fp16.\n\n");
  for (const char* name : kFlags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string def = flag->DefaultValue();
    if (def.empty()) def = "\"\"";
    std::printf("  --%-17s %s (default: %s)\n", name, flag->Help().c_str(), def.c_str());
  }
}

std::vector<std::string> given;  // the flags on the command line

bool is_given(std::string_view name) { return std::find(given.begin(), given.end(), name) != given.end(); }

bool is_ours(std::string_view name) {
  for (const char* f : kFlags) {
    if (name == f) return true;
  }
  return false;
}

// --name=value or --name value; anything else, an unknown name or a value that does not parse: exit 2.
void parse_flags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "--helpfull") {
      print_help();
      std::exit(0);
    }
    if (arg.substr(0, 2) != "--")
      usage_error("unexpected argument '" + std::string(arg) + "' (flags are --name=value)");
    arg.remove_prefix(2);
    const size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    std::string value;
    if (eq != std::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage_error("--" + name + " needs a value");
    }
    if (!is_ours(name)) usage_error("unknown flag --" + name);
    given.push_back(name);
    std::string error;
    if (!absl::FindCommandLineFlag(name)->ParseFrom(value, &error)) {
      usage_error("--" + name + "=" + value + ": " + error);
    }
  }
}

template <typename E>
E pick(const char* flag, const std::string& value, std::initializer_list<std::pair<const char*, E>> choices) {
  std::string names;
  for (const auto& [n, e] : choices) {
    if (value == n) return e;
    names += names.empty() ? n : std::string(" | ") + n;
  }
  usage_error(std::string("--") + flag + "=" + value + ": expected " + names);
}

RunOptions options_from_flags() {
  RunOptions o;
  o.model = pick<ModelKind>("model", absl::GetFlag(FLAGS_model),
                            {{"mlp", ModelKind::kMLP}, {"cnn", ModelKind::kCNN}, {"gpt", ModelKind::kGPT}});
  const std::string data = absl::GetFlag(FLAGS_data);
  o.data = data.empty() ? DataKind::kDefault
                        : pick<DataKind>("data", data,
                                         {{"fashion-mnist", DataKind::kFashionMnist},
                                          {"text", DataKind::kText},
                                          {"synthetic", DataKind::kSynthetic}});
  o.data_path = absl::GetFlag(FLAGS_data_path);
  o.mlp_hidden.clear();
  const std::string hidden = absl::GetFlag(FLAGS_mlp_hidden);
  for (absl::string_view part : absl::StrSplit(hidden, ',', absl::SkipEmpty())) {
    int64_t h = 0;
    if (!absl::SimpleAtoi(part, &h))
      usage_error("--mlp_hidden=" + hidden + ": '" + std::string(part) + "' is not an integer");
    o.mlp_hidden.push_back(h);
  }
  o.n_layer = absl::GetFlag(FLAGS_n_layer);
  o.n_head = absl::GetFlag(FLAGS_n_head);
  o.n_embd = absl::GetFlag(FLAGS_n_embd);
  o.block_size = absl::GetFlag(FLAGS_block_size);
  o.dropout = absl::GetFlag(FLAGS_dropout);
  o.precision = pick<Precision>("precision", absl::GetFlag(FLAGS_precision),
                                {{"fp32", Precision::kF32}, {"fp16", Precision::kF16}, {"bf16", Precision::kBF16}});
  o.optimizer = pick<OptimizerKind>(
      "optimizer", absl::GetFlag(FLAGS_optimizer),
      {{"sgd", OptimizerKind::kSGD}, {"adam", OptimizerKind::kAdam}, {"adamw", OptimizerKind::kAdamW}});
  o.lr = absl::GetFlag(FLAGS_lr);
  o.momentum = absl::GetFlag(FLAGS_momentum);
  if (const std::string wd = absl::GetFlag(FLAGS_weight_decay); !wd.empty()) {
    double v = 0;
    if (!absl::SimpleAtod(wd, &v)) usage_error("--weight_decay=" + wd + ": not a number");
    o.weight_decay = v;
  }
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  if (o.model == ModelKind::kGPT && !is_given("batch_size")) o.batch_size = 32;  // 4,096 tokens per step
  o.epochs = absl::GetFlag(FLAGS_epochs);
  o.max_steps = absl::GetFlag(FLAGS_max_steps);
  o.grad_accum = absl::GetFlag(FLAGS_grad_accum);
  o.clip_grad_norm = absl::GetFlag(FLAGS_clip_grad_norm);
  o.scaler.init_scale = absl::GetFlag(FLAGS_init_scale);
  o.scaler.growth_factor = absl::GetFlag(FLAGS_growth_factor);
  o.scaler.backoff_factor = absl::GetFlag(FLAGS_backoff_factor);
  o.scaler.growth_interval = absl::GetFlag(FLAGS_growth_interval);
  o.scaler.hysteresis = absl::GetFlag(FLAGS_hysteresis);
  o.scaler.min_scale = absl::GetFlag(FLAGS_min_scale);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.device = absl::GetFlag(FLAGS_device);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.eval_batches = absl::GetFlag(FLAGS_eval_batches);
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  o.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  o.resume = absl::GetFlag(FLAGS_resume);
  o.metrics = absl::GetFlag(FLAGS_metrics);
  o.sample_chars = absl::GetFlag(FLAGS_sample_chars);
  o.dist_timeout_s = absl::GetFlag(FLAGS_dist_timeout);
  o.progress = pick<ProgressMode>("progress", absl::GetFlag(FLAGS_progress),
                                  {{"auto", ProgressMode::kAuto},
                                   {"bar", ProgressMode::kBar},
                                   {"lines", ProgressMode::kLines},
                                   {"none", ProgressMode::kNone}});
  return o;
}

}  // namespace
}  // namespace mantissa

int main(int argc, char** argv) {
  using namespace mantissa;
  // OpenMP threads spin while they wait for the next parallel region: libgomp's default spin (300,000
  // rounds) starves the loader's worker thread and everything else on a busy machine (MLP f32 steps ran
  // at 1,000 samples/s instead of 4,300 at a load of 5 on 2 cores), and sleeping at once
  // (OMP_WAIT_POLICY=passive) costs 15-20% on an idle one (CNN bf16: 8,900 vs 10,800 samples/s). A short
  // spin keeps the idle speed. libgomp reads its variables once, when it is loaded, so the program sets
  // GOMP_SPINCOUNT and runs itself again; a user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is left as it is.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    setenv("GOMP_SPINCOUNT", "10000", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then go on with the default policy
  }
  parse_flags(argc, argv);
  const RunOptions options = options_from_flags();
  if (absl::Status s = validate(options); !s.ok()) usage_error(std::string(s.message()));
  // Under mpirun errors name their rank. A non-zero exit of any rank aborts the whole job (the MPI process
  // group does it at exit), so the other ranks end too instead of waiting for this one.
  const LaunchInfo launch = launch_info();
  const std::string who = launch.world_size > 1 ? "mantissa-train: rank " + std::to_string(launch.rank) + ": "
                                                : std::string("mantissa-train: ");
  try {
    absl::StatusOr<RunSummary> summary = run(options, stdout);
    if (!summary.ok()) {
      std::fprintf(stderr, "%s%s\n", who.c_str(), std::string(summary.status().message()).c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s%s\n", who.c_str(), e.what());
    return 1;
  }
  return 0;
}

// mantissa-train's run: data, model, optimizer, loaders and Trainer from RunOptions; progress and summary.
#include "train/run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <omp.h>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "amp/precision_report.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/text.h"
#include "framework/autograd.h"
#include "framework/cpu_peak.h"
#include "framework/cuda/device.h"
#include "framework/dist/nccl_process_group.h"
#include "framework/generator.h"
#include "framework/profiler/profile.h"
#include "framework/random.h"
#include "models/cnn.h"
#include "models/gpt.h"
#include "models/layers/sync_batch_norm.h"
#include "models/mlp.h"
#include "ops/fp8/accumulator.h"
#include "ops/shape/shape.h"
#include "optim/adam.h"
#include "optim/lion.h"
#include "optim/sgd.h"
#include "train/memory_report.h"
#include "train/mpi_launcher_env.h"
#include "train/profile_window.h"
#include "train/progress.h"
#include "train/rank_agreement.h"
#include "train/run_flags.h"
#include "train/run_parts.h"
#include "train/speed_report.h"
#include "train/zero.h"

namespace mantissa {

using run_parts::build_model;
using run_parts::build_optimizer;
using run_parts::Data;
using run_parts::Model;

DataKind effective_data(const RunOptions& o) {
  if (o.data != DataKind::kDefault) return o.data;
  return o.model == ModelKind::kGPT ? DataKind::kText : DataKind::kFashionMnist;
}

namespace {

// Sizes of the synthetic sets: small, so that start-up is quick (they are for timing steps, not learning).
constexpr int64_t kSyntheticTrain = 8192, kSyntheticTest = 1024, kSyntheticTextChars = 1 << 20;

absl::StatusOr<Data> load_data(const RunOptions& o) {
  Data d;
  const DataKind kind = effective_data(o);
  if (kind == DataKind::kFashionMnist) {
    MnistOptions mnist{.scaling = PixelScaling::kNormalized};
    if (!o.data_path.empty()) mnist.dir = o.data_path;
    absl::StatusOr<MnistData> train = read_mnist(MnistSplit::kTrain, mnist);
    if (!train.ok()) return train.status();
    absl::StatusOr<MnistData> test = read_mnist(MnistSplit::kTest, mnist);
    if (!test.ok()) return test.status();
    d.train = std::make_shared<TensorDataset>(std::vector<Tensor>{train->images, train->labels});
    d.eval = std::make_shared<TensorDataset>(std::vector<Tensor>{test->images, test->labels});
  } else if (kind == DataKind::kText) {
    TextOptions text{.block_size = o.block_size};
    if (!o.data_path.empty()) text.path = o.data_path;
    absl::StatusOr<TextData> t = load_text(text);
    if (!t.ok()) return t.status();
    d.train = t->train;
    d.eval = t->val;
    d.vocab_size = t->vocab.size();
    d.vocab = std::move(t->vocab);
  } else if (o.model == ModelKind::kGPT) {  // synthetic tokens: uniform over a 65-character vocabulary
    Generator gen(o.seed + 1000);
    d.vocab_size = 65;
    auto tokens = [&](int64_t n) {
      std::vector<int64_t> ids(static_cast<size_t>(n));
      for (int64_t& id : ids) id = static_cast<int64_t>(gen.next_u32() % 65);
      return std::make_shared<CharDataset>(std::move(ids), o.block_size);
    };
    d.train = tokens(kSyntheticTextChars);
    d.eval = tokens(kSyntheticTextChars / 10);
  } else {  // synthetic images: N(0, 1) pixels and uniform labels
    Generator gen(o.seed + 1000);
    auto images = [&](int64_t n) {
      Tensor x = randn({n, 1, CNN::kImageSize, CNN::kImageSize}, {}, &gen);
      std::vector<int64_t> labels(static_cast<size_t>(n));
      for (int64_t& y : labels) y = static_cast<int64_t>(gen.next_u32() % 10);
      return std::make_shared<TensorDataset>(std::vector<Tensor>{x, from_vector(labels, {n})});
    };
    d.train = images(kSyntheticTrain);
    d.eval = images(kSyntheticTest);
  }
  return d;
}

}  // namespace

namespace run_parts {

Model build_model(const RunOptions& o, const Data& data) {
  // Initial values come from the default generator seeded with --seed; the Trainer re-seeds it (with
  // --seed + 1) when training starts, for dropout, and saves its state in checkpoints.
  manual_seed(o.seed);
  Model m;
  if (o.model == ModelKind::kMLP) {
    auto mlp = std::make_shared<MLP>(CNN::kImageSize * CNN::kImageSize, o.mlp_hidden, 10, MLPOptions{});
    m.task = classification_task([mlp](const Tensor& x) { return mlp->forward(x.flatten(1)); });
    m.module = mlp;
  } else if (o.model == ModelKind::kCNN) {
    auto cnn = std::make_shared<CNN>(CNNOptions{});
    m.task = classification_task([cnn](const Tensor& x) { return cnn->forward(x); });
    m.module = cnn;
  } else {
    GPTConfig config{.vocab_size = data.vocab_size,
                     .n_layer = o.n_layer,
                     .n_head = o.n_head,
                     .n_embd = o.n_embd,
                     .block_size = o.block_size,
                     .dropout = o.dropout,
                     .recompute = o.recompute == RecomputeMode::kBlocks};
    m.gpt = std::make_shared<GPT>(config, GPTOptions{});
    m.task = language_model_task(*m.gpt);
    m.module = m.gpt;
  }
  // The ladder without masters trains the bf16 weights themselves (PyTorch's model.to(torch.bfloat16)).
  if (o.master_weights == MasterWeights::kNone) m.module->to(DType::kBF16);
  return m;
}

PrecisionLadder precision_ladder(const RunOptions& o) {
  return {.master_weights = o.master_weights,
          .update_rounding = o.update_rounding,
          .optimizer_state = o.optimizer_state,
          .seed = o.seed};
}

std::unique_ptr<Optimizer> build_optimizer(const RunOptions& o, Module& model) {
  const PrecisionLadder ladder = precision_ladder(o);
  switch (o.optimizer) {
    case OptimizerKind::kSGD:
      return std::make_unique<SGD>(
          model.named_parameters(),
          SGDOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay.value_or(0.0)}, ladder);
    case OptimizerKind::kAdam:
      return std::make_unique<Adam>(model.named_parameters(),
                                    AdamOptions{.lr = o.lr, .weight_decay = o.weight_decay.value_or(0.0)}, ladder);
    case OptimizerKind::kAdamW:
      return std::make_unique<AdamW>(model.named_parameters(),
                                     AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay.value_or(1e-2)}, ladder);
    case OptimizerKind::kLion:
      return std::make_unique<Lion>(model.named_parameters(),
                                    LionOptions{.lr = o.lr, .weight_decay = o.weight_decay.value_or(0.0)}, ladder);
  }
  return nullptr;
}

}  // namespace run_parts

// "cpu", "cuda" (GPU 0) or "cuda:N".
std::optional<Device> parse_device(const std::string& s) {
  if (s == "cpu") return kCPU;
  if (s == "cuda") return cuda(0);
  int index = -1;
  if (s.starts_with("cuda:") && absl::SimpleAtoi(s.substr(5), &index) && index >= 0 && index < 64) return cuda(index);
  return std::nullopt;
}

namespace {

// fp8: where the run's FP8 casts overflowed their format, if they did: the total, then the roles with the
// most (each with its current scale and the amax it came from), so that a recipe that saturates is visible
// without a debugger. E4M3 saturates at +-448 by default, E5M2 at +-57344 (or becomes inf: no_saturate).
void print_fp8_overflows(std::FILE* out, const amp::Fp8Context& fp8) {
  std::vector<amp::Fp8Context::TensorStats> stats = fp8.stats();
  // Per role over every linear and cast of the run: the values saturated at the format's maximum and the finite
  // non-zero values that became 0. For block-scaled recipes that is all (their scales follow the values, so there
  // is no scale to show); per-tensor recipes then name the roles that overflowed most.
  {
    std::fprintf(out, "fp8 (%s, %s elements): values saturated / flushed to zero in %zu FP8 linears:",
                 fp8.recipe().block_scaled() ? amp::fp8_granularity_name(fp8.recipe().granularity)
                 : fp8.recipe().input.scaling == amp::Fp8Scaling::kDelayed ? "delayed"
                                                                           : "dynamic",
                 fp8.recipe().fp4() ? "E2M1" : "FP8", fp8.managed().size());
    for (amp::Fp8Role role : amp::kFp8Roles) {
      int64_t overflow = 0, underflow = 0;
      for (const auto& s : stats) {
        if (s.role != amp::fp8_role_name(role)) continue;
        overflow += s.overflow;
        underflow += s.underflow;
      }
      std::fprintf(out, " %s %lld / %lld%s", amp::fp8_role_name(role), static_cast<long long>(overflow),
                   static_cast<long long>(underflow), role == amp::Fp8Role::kGradOutput ? "\n" : ";");
    }
    if (fp8.recipe().block_scaled()) return;
  }
  int64_t total = 0;
  for (const auto& s : stats) total += s.overflow;
  if (total == 0) {
    std::fprintf(out, "fp8: no value overflowed its format in %zu FP8 linears\n", fp8.managed().size());
    return;
  }
  std::ranges::stable_sort(stats, std::greater<>{}, &amp::Fp8Context::TensorStats::overflow);
  std::fprintf(out, "fp8: %lld values overflowed their format; the most:\n", static_cast<long long>(total));
  for (size_t i = 0; i < std::min<size_t>(3, stats.size()) && stats[i].overflow > 0; ++i) {
    const auto& s = stats[i];
    std::fprintf(out, "  %-36s %-11s %s  %lld (now scale %g from amax %g)\n", s.name.c_str(), s.role.c_str(),
                 std::string(dtype_name(s.dtype)).c_str(), static_cast<long long>(s.overflow), s.scale, s.amax);
  }
}

}  // namespace

absl::Status validate(const RunOptions& o) {
  // Each flag's own range comes from the table (train/run_flags.cc); what is left is the device's form and
  // the rules that tie two flags together.
  if (absl::Status s = check_flag_ranges(o); !s.ok()) return s;
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (!parse_device(o.device)) return bad("--device=", o.device, ": expected cpu, cuda or cuda:N");
  const DataKind data = effective_data(o);
  if (o.model == ModelKind::kGPT && data == DataKind::kFashionMnist) {
    return bad("--data=fashion-mnist does not fit --model=gpt (use --data=text or --data=synthetic)");
  }
  if (o.model != ModelKind::kGPT && data == DataKind::kText) {
    return bad("--data=text needs --model=gpt (mlp and cnn classify images)");
  }
  if (o.recompute != RecomputeMode::kNone && o.model != ModelKind::kGPT) {
    return bad("--recompute=blocks needs --model=gpt (the only model with blocks to recompute)");
  }
  if (o.batchnorm == BatchNormStats::kSync && o.model != ModelKind::kCNN) {
    return bad("--batchnorm=sync needs --model=cnn (the only model with BatchNorm)");
  }
  if (o.n_embd % o.n_head != 0) {
    return bad("--n_embd (", o.n_embd, ") must be a multiple of --n_head (", o.n_head, ")");
  }
  if (!o.report.empty() && o.report != "precision" && o.report != "speed" && o.report != "memory") {
    return bad("--report=", o.report, ": expected precision | speed | memory");
  }
  if (!o.report.empty() && o.report_out.empty()) return bad("--report_out is empty: it names the report's files");
  // The precision ladder's combinations (optim/precision_ladder.h).
  if (o.master_weights == MasterWeights::kFp32 && o.update_rounding != UpdateRounding::kNearest) {
    return bad("--update_rounding=", update_rounding_name(o.update_rounding),
               " rounds updates into bf16 weights, but --master_weights=fp32 keeps fp32 masters that take them "
               "exactly. HINT: --master_weights=none");
  }
  if (o.master_weights == MasterWeights::kNone && o.precision != Precision::kBF16 && o.precision != Precision::kFp8) {
    return bad("--master_weights=none trains bf16 weights, which --precision=", precision_name(o.precision),
               o.precision == Precision::kF16 ? " cannot hold (f16 weights without masters need a loss scaler and an "
                                                "f16 rounding rule this ladder does not have)"
                                              : " does not compute in (it runs the layers in f32)",
               ". HINT: --precision=bf16");
  }
  if (o.optimizer_state != StateStorage::kFp32 && o.optimizer == OptimizerKind::kSGD && o.momentum == 0.0) {
    return bad("--optimizer_state=", state_storage_name(o.optimizer_state),
               " stores the momentum buffer, but --optimizer=sgd with --momentum=0 has no state to store. HINT: "
               "--momentum=0.9, or --optimizer_state=fp32");
  }
  if (o.epochs == 0 && o.max_steps == 0 && o.model != ModelKind::kGPT && o.report.empty()) {
    return bad("--epochs=0 and --max_steps=0: the run would never end");
  }
  const amp::GradScalerOptions& s = o.scaler;
  if (!(s.min_scale >= 0.0) || s.min_scale > s.init_scale) {
    return bad("--min_scale must be in [0, --init_scale], got ", s.min_scale);
  }
  if (absl::StatusOr<amp::Fp8Recipe> r = amp::parse_fp8_recipe(o.fp8_recipe); !r.ok()) {
    return bad("--fp8_recipe=", o.fp8_recipe, ": ", r.status().message());
  }
  if (!find_fp8_accumulator(o.fp8_accumulator)) {
    return bad("--fp8_accumulator=", o.fp8_accumulator,
               ": expected f32, hopper or hopper-fast (how the CPU's FP8 GEMMs sum their products)");
  }
  if (const auto r = amp::parse_fp8_recipe(o.fp8_recipe); r.ok() && r->block_k() != 0 && r->block_k() != 128 &&
                                                          o.precision == Precision::kFp8 &&
                                                          o.fp8_accumulator != "f32") {
    return bad("--fp8_accumulator=", o.fp8_accumulator, " models Hopper's FP8 tensor core, which has no ", r->block_k(),
               "-element block scaling for --fp8_recipe=", amp::fp8_granularity_name(r->granularity),
               " (MX and NVFP4 are Blackwell formats). HINT: --fp8_accumulator=f32");
  }
  if (o.precision == Precision::kFp8 && o.fp8_accumulator != "f32" && o.device != "cpu") {
    return bad("--fp8_accumulator=", o.fp8_accumulator, " models the tensor core on the CPU; on --device=", o.device,
               " the GPU's own tensor core sums. HINT: leave it at f32 there");
  }
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) return bad("--checkpoint_every needs --checkpoint_dir");
  if ((o.resume == "latest" || o.resume == "auto") && o.checkpoint_dir.empty()) {
    return bad("--resume=", o.resume, " needs --checkpoint_dir");
  }
  return absl::OkStatus();
}

absl::StatusOr<RunSummary> run(const RunOptions& options, std::FILE* out, StopRequest* stop) {
  if (absl::Status s = validate(options); !s.ok()) return s;
  RunOptions o = options;
  const bool gpt = o.model == ModelKind::kGPT;
  if (gpt && o.max_steps == 0 && o.epochs == RunOptions{}.epochs) o.max_steps = 2000, o.epochs = 0;
  if (gpt && o.eval_every == 0) o.eval_every = 200;
  if (gpt && o.eval_batches == 0) o.eval_batches = 20;

  // Under mpirun: the job's ranks. The cores of a machine are shared by its ranks unless --threads (or
  // OMP_NUM_THREADS) says otherwise.
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      process_group_from_launcher({.timeout = std::chrono::seconds(o.dist_timeout_s)});
  if (!group.ok()) return group.status();
  const int rank = (*group)->rank(), world = (*group)->size();
  if (o.threads > 0) {
    omp_set_num_threads(static_cast<int>(o.threads));
  } else if (world > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    omp_set_num_threads(std::max(1, omp_get_num_procs() / std::max(1, launch_info().local_size)));
  }
  // Ranks other than 0 print nothing (their errors still reach the caller).
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet(rank == 0 ? nullptr : std::fopen("/dev/null", "w"),
                                                        &std::fclose);
  if (quiet) out = quiet.get();
  // Before any other collective the ranks agree that they were started with the same flags and start from
  // the same point, and then that they built the same model: otherwise different collectives would meet
  // (train/run_agreement.cc). Each rank reads its checkpoint here, and restores it once the Trainer exists.
  if (absl::Status s = run_parts::agree_on_flags(**group, o); !s.ok()) return s;
  absl::StatusOr<run_parts::ResumePoint> start = run_parts::agree_on_resume(**group, o);
  if (!start.ok()) return start.status();
  // The batch on each rank: --batch_size, or --global_batch over the ranks; a resumed run keeps the global
  // batch of its checkpoint on any number of ranks (train/trainer.h).
  absl::StatusOr<int64_t> batch_size =
      run_parts::batch_size_per_rank(o, world, start->checkpoint ? &*start->checkpoint : nullptr, start->path);
  if (!batch_size.ok()) return agreed_error(batch_size.status());
  o.batch_size = *batch_size;

  absl::StatusOr<Data> data = load_data(o);
  if (!data.ok()) return data.status();
  Model model = build_model(o, *data);
  if (absl::Status s = run_parts::agree_on_model(**group, *model.module); !s.ok()) return s;
  // --collective_check: every collective from here on is checked. The checks above ran without it (they are
  // what makes every rank's --collective_check the same, and the check's own all-gathers would otherwise
  // meet other collectives).
  if (o.collective_check != CollectiveCheck::kOff) {
    group =
        process_group_from_launcher({.timeout = std::chrono::seconds(o.dist_timeout_s), .check = o.collective_check});
    if (!group.ok()) return group.status();
  }
  Device device = *parse_device(o.device);
  // Under mpirun one process per GPU: --device=cuda means this rank's GPU (its rank on this machine).
  if (o.device == "cuda" && world > 1) device = cuda((*group)->local_rank());
  if (device.is_cuda()) {
    if (device.index >= cuda_device_count()) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device=", o.device, ": ", cuda_device_count(), " CUDA devices present",
                       cuda_device_count() == 0 ? ": " + cuda_unavailable_reason() : ""));
    }
    model.module->to(device);  // before the optimizer: it keeps the parameters it is given
    if (world > 1) {
      // Gradients and the scaler's found_inf are on the GPU: NCCL reduces them; the logged loss and the
      // evaluation sums stay on MPI.
      std::unique_ptr<ProcessGroup> nccl =
          make_nccl_process_group(**group, device, {.timeout = std::chrono::seconds(o.dist_timeout_s)});
      *group = make_device_dispatch_group(std::move(*group), std::move(nccl));
    }
  }
  // The statistics of the global batch: every BatchNorm2d all-reduces them over the ranks (in a world of
  // one the same code runs with nothing to add, so that one process computes what N ranks do).
  if (o.batchnorm == BatchNormStats::kSync) convert_sync_batchnorm(*model.module, **group);
  std::unique_ptr<Optimizer> optimizer = build_optimizer(o, *model.module);
  const PinMemory pin = device.is_cuda() ? PinMemory::kYes : PinMemory::kNo;

  // Each rank draws its shard (PyTorch's DistributedSampler) of the same shuffled order; --batch_size is per
  // rank. The eval loader is the whole set on every rank: the Trainer splits its batches among the ranks.
  DataLoader train(data->train, {.batch_size = o.batch_size,
                                 .shuffle = Shuffle::kRandom,
                                 .seed = o.seed,
                                 .shard = {.rank = rank, .world_size = world},
                                 .pin_memory = pin});
  // Classifiers evaluate on the whole test set in order; the language model on a fixed random sample of
  // validation blocks (the same at every evaluation) in batches of the global batch size, so that N ranks
  // with --batch_size=B evaluate the blocks one process with N x B does.
  DataLoader eval(data->eval, gpt ? DataLoaderOptions{.batch_size = o.batch_size * world,
                                                      .shuffle = Shuffle::kRandom,
                                                      .seed = o.seed + 1,
                                                      .pin_memory = pin}
                                  : DataLoaderOptions{.batch_size = 1000, .pin_memory = pin});

  TrainerConfig config{.precision = o.precision,
                       .epochs = o.epochs,
                       // A report trains nothing, but the Trainer (which resumes the checkpoint) needs an end.
                       .max_steps = !o.report.empty() && o.epochs == 0 && o.max_steps == 0 ? 1 : o.max_steps,
                       .grad_accum = o.grad_accum,
                       .clip_grad_norm = o.clip_grad_norm,
                       .eval_every = o.eval_every,
                       .eval_batches = o.eval_batches,
                       .eval_at_start = gpt ? EvalAtStart::kYes : EvalAtStart::kNo,
                       .checkpoint_dir = o.checkpoint_dir,
                       .checkpoint_every = o.checkpoint_every,
                       .keep_checkpoints = o.keep_checkpoints,
                       .seed = o.seed + 1,
                       .metrics_path = o.metrics,
                       .tensorboard_dir = o.tensorboard,
                       .tensorboard_histogram_every = o.tensorboard_histogram_every,
                       .config_json = o.config_json.empty() ? to_json(o) : o.config_json,
                       .process_group = group->get(),
                       .zero_stage = static_cast<int>(o.zero),
                       .stop = stop};
  if (o.precision == Precision::kF16) config.scaler = o.scaler;
  if (o.precision == Precision::kFp8) {
    config.fp8_recipe = *amp::parse_fp8_recipe(o.fp8_recipe);  // validate() checked it
    config.fp8.accumulator = parse_fp8_accumulator(o.fp8_accumulator);
    config.fp8.seed = o.seed;  // stochastic rounding's key (FP4 recipes)
  }
  Trainer trainer(config, *model.module, model.task, *optimizer, train, &eval);
  if (data->vocab) trainer.set_data("vocabulary", data->vocab->serialize());
  if (start->checkpoint) {
    if (absl::Status s = trainer.restore(*start->checkpoint, start->path); !s.ok()) return s;
    start->checkpoint.reset();
    // The model's token ids mean the characters of the vocabulary it was trained with.
    if (data->vocab && trainer.data().at("vocabulary") != data->vocab->serialize()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--resume=", o.resume, ": the checkpoint's vocabulary differs from the one of ",
          o.data_path.empty() ? std::string(kFortunesDir) : o.data_path, " (resume with the text it was trained on)"));
    }
    std::fprintf(out, "resumed at step %lld\n", static_cast<long long>(trainer.step()));
  }

  if (o.report == "speed") return run_parts::speed_report_run(o, model, *optimizer, train, device, out);
  if (o.report == "memory") return run_parts::memory_report_run(o, *data, model, *optimizer, train, device, out);
  if (!o.report.empty()) return run_parts::precision_report_run(o, model, train, trainer, device, out);

  const std::string ranks =
      absl::StrCat(world > 1 ? absl::StrCat(" per rank x ", world, " ranks (mpi)") : "",
                   o.global_batch > 0 ? absl::StrCat(" (--global_batch=", o.global_batch, ")") : "");
  std::fprintf(out, "mantissa-train: %s on %s, %s, %s lr %g, batch %lld%s, %lld parameters\n", choice_name(o.model),
               choice_name(effective_data(o)), precision_name(o.precision), choice_name(o.optimizer), o.lr,
               static_cast<long long>(o.batch_size), ranks.c_str(), static_cast<long long>([&] {
                 int64_t n = 0;
                 for (const NamedTensor& p : model.module->named_parameters()) n += p.tensor.numel();
                 return n;
               }()));
  if (const ZeroRedundancy* zero = trainer.zero()) {
    std::fprintf(out, "ZeRO-1: rank %d keeps the optimizer state of %lld of the %lld elements of the parameters\n",
                 rank, static_cast<long long>(zero->shard_numel()), static_cast<long long>(zero->total_numel()));
  }
  const int64_t total = o.max_steps > 0 ? o.max_steps : o.epochs * trainer.steps_per_epoch();
  std::optional<ProgressReporter> progress;
  if (o.progress != ProgressMode::kNone && rank == 0) {
    progress.emplace(
        out,
        ProgressOptions{.style = o.progress == ProgressMode::kBar     ? ProgressStyle::kBar
                                 : o.progress == ProgressMode::kLines ? ProgressStyle::kLines
                                                                      : ProgressStyle::kAuto,
                        .total_steps = total,
                        .steps_per_epoch = trainer.steps_per_epoch(),
                        .skipped_before = trainer.scaler().is_enabled() ? trainer.scaler().stats().skipped_steps : 0});
    trainer.on_step_end([&](const StepMetrics& m) { progress->on_step(m); });
    trainer.on_eval_end([&](const EvalMetrics& m) { progress->on_eval(m); });
  }
  std::optional<ProfileWindow> profile;
  if (!o.profile.empty()) {
    // With several ranks each writes its own trace, <path>.rank<r>.
    profile.emplace(world > 1 ? absl::StrCat(o.profile, ".rank", rank) : o.profile, trainer.step() + o.profile_wait,
                    o.profile_steps, trainer.step(), rank, world, out);
    if (absl::Status s = profile->check_writable(); !s.ok()) return s;
    if (device.is_cpu()) profile->measure_peak_for(precision_dtype(o.precision));
    profile->describe_resident([&] {
      const MemoryParts p = resident_parts(*model.module, *optimizer);
      return absl::StrCat("weights ", format_bytes(p.weights), ", working copies ", format_bytes(p.working_copies),
                          ", gradients ", format_bytes(p.gradients), ", optimizer state ",
                          format_bytes(p.optimizer_state),
                          " (now); the rest: activations, temporaries, the data set and the loaders");
    });
    trainer.on_step_end([&](const StepMetrics& m) { profile->on_step(m.step); });
  }
  absl::StatusOr<RunSummary> summary = trainer.fit();
  if (profile) {
    if (absl::Status s = profile->finish(); !s.ok()) return s;
  }
  if (!summary.ok()) return summary.status();
  if (progress) {
    progress->on_summary(*summary);
  } else {
    // A stopped run says so first: it is not done, and it has no final evaluation.
    if (summary->stopped) {
      std::fprintf(out, "stopped at step %lld: %lld skipped, scale %g, %.0f samples/s, %.1f s\n",
                   static_cast<long long>(summary->stopped->step), static_cast<long long>(summary->skipped_steps),
                   summary->final_scale, summary->samples_per_s, summary->wall_s);
    } else {
      std::fprintf(out, "done: %lld steps (%lld skipped), final scale %g, %.0f samples/s, %.1f s\n",
                   static_cast<long long>(summary->steps), static_cast<long long>(summary->skipped_steps),
                   summary->final_scale, summary->samples_per_s, summary->wall_s);
      if (summary->test_accuracy) std::fprintf(out, "test accuracy: %.2f%%\n", 100.0 * *summary->test_accuracy);
      if (summary->val_loss) std::fprintf(out, "validation loss: %.4f\n", *summary->val_loss);
    }
  }
  if (trainer.fp8() != nullptr && rank == 0) print_fp8_overflows(out, *trainer.fp8());
  if (model.gpt && data->vocab && o.sample_chars > 0 && rank == 0 && !summary->stopped) {
    Generator sample_gen(o.seed + 7);
    absl::StatusOr<std::vector<int64_t>> prompt = data->vocab->encode(U"\n");
    const Tensor start =
        prompt.ok() ? from_vector(*prompt, {static_cast<int64_t>(prompt->size())}) : zeros({1}, {.dtype = DType::kI64});
    const Tensor text = model.gpt->generate(start, o.sample_chars, {.temperature = 0.8, .generator = &sample_gen});
    const Tensor tokens = text.to(kCPU).contiguous();
    const std::vector<int64_t> ids(tokens.data<int64_t>(), tokens.data<int64_t>() + tokens.numel());
    std::fprintf(out, "--- sample ---\n%s\n--- end of sample ---\n", data->vocab->decode(ids).c_str());
  }
  std::fflush(out);
  return summary;
}

}  // namespace mantissa

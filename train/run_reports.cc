// mantissa-train's reports, which replace training (--report=precision | speed | memory; train/run_parts.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <omp.h>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "amp/precision_report.h"
#include "framework/autograd.h"
#include "framework/cpu_peak.h"
#include "framework/profiler/profile.h"
#include "ops/shape/shape.h"
#include "train/memory_report.h"
#include "train/precision.h"
#include "train/run_flags.h"
#include "train/run_parts.h"
#include "train/speed_report.h"

namespace mantissa::run_parts {

namespace {

// A report's file whole or not at all: written beside, then renamed.
absl::Status write_whole_file(const std::string& path, const std::string& text) {
  const std::string partial = path + ".partial";
  std::FILE* f = std::fopen(partial.c_str(), "w");
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("--report_out: cannot create ", partial));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) {
    std::remove(partial.c_str());
    return absl::InternalError(absl::StrCat("--report_out: writing ", path, " failed"));
  }
  std::filesystem::rename(partial, path);
  return absl::OkStatus();
}

// Inference at batch 1 (latency per call: p50, p99 of 50 calls) and at the training batch (samples/s), the
// model in eval mode without grad, under `precision`'s autocast. Host time: the CPU's calls are done when
// they return.
void measure_inference(StepProfile& r, Model& model, const Example& batch, Precision precision, Device device) {
  model.module->eval();
  NoGradGuard no_grad;
  PrecisionScope autocast(precision, device, nullptr);
  Example one = batch;
  for (Tensor& t : one) t = t.narrow(0, 0, 1).contiguous();
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < 3; ++i) (void)model.task.evaluate(one);
  std::vector<double> ms;
  for (int i = 0; i < 50; ++i) {
    const auto t0 = clock::now();
    (void)model.task.evaluate(one);
    ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  r.infer_p50_ms = ms[ms.size() / 2];
  r.infer_p99_ms = ms[static_cast<size_t>(std::ceil(0.99 * static_cast<double>(ms.size()))) - 1];
  (void)model.task.evaluate(batch);
  const auto t0 = clock::now();
  constexpr int kCalls = 5;
  for (int i = 0; i < kCalls; ++i) (void)model.task.evaluate(batch);
  const double s = std::chrono::duration<double>(clock::now() - t0).count();
  r.infer_samples_per_s = kCalls * static_cast<double>(batch[0].size(0)) / s;
  model.module->train();
}

// The reports write <report_out>_*: its folder must exist (nothing is created behind the user's back).
absl::Status check_report_out(const std::string& report_out) {
  namespace fs = std::filesystem;
  const fs::path prefix(report_out);
  if (prefix.has_parent_path() && !fs::is_directory(prefix.parent_path())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--report_out=", report_out, ": the folder ", prefix.parent_path().string(), " does not exist"));
  }
  return absl::OkStatus();
}

}  // namespace

// --report=speed: --profile_wait + --profile_steps training steps in fp32, bf16 and fp16 (with the
// GradScaler), the last --profile_steps of each profiled; then the comparison (speed_report.h) to `out`,
// <report_out>_speed.json and the stacked bars <report_out>_speed.png. Trains the model a few steps.
absl::StatusOr<RunSummary> speed_report_run(const RunOptions& o, Model& model, Optimizer& optimizer, DataLoader& train,
                                            Device device, std::FILE* out) {
  if (absl::Status folder = check_report_out(o.report_out); !folder.ok()) return folder;
  if (!device.is_cpu()) {
    return absl::UnimplementedError("--report=speed: on a GPU the profiler has host times only; run it on the CPU");
  }
  std::optional<Example> sample = train.next();
  if (!sample) return absl::FailedPreconditionError("--report=speed: the training set gave no batch");
  const std::vector<CpuPeak> peaks = measure_cpu_peaks(omp_get_max_threads(), 0.2);
  std::fprintf(out, "speed report: %s, batch %lld, %lld steps profiled after %lld in each precision, %d threads\n",
               choice_name(o.model), static_cast<long long>(o.batch_size), static_cast<long long>(o.profile_steps),
               static_cast<long long>(o.profile_wait), omp_get_max_threads());
  std::vector<StepProfile> rows;
  for (Precision p : {Precision::kF32, Precision::kBF16, Precision::kF16}) {
    optimizer.disable_working_copies();  // each Trainer sets up its own precision's
    TrainerConfig config{.precision = p, .max_steps = o.profile_wait + o.profile_steps, .seed = o.seed + 1};
    if (p == Precision::kF16) config.scaler = o.scaler;
    Trainer trainer(config, *model.module, model.task, optimizer, train, nullptr);
    profiler::Profiler prof;
    if (o.profile_wait == 0) prof.start();
    trainer.on_step_end([&](const StepMetrics& m) {
      if (m.step == o.profile_wait && !prof.running()) prof.start();
    });
    absl::StatusOr<RunSummary> s = trainer.fit();
    if (!s.ok()) return s.status();
    StepProfile r = summarize_steps(prof.stop(), precision_name(p), o.profile_steps, o.batch_size * o.grad_accum);
    r.gemm_peak_gflops = gemm_peak_gflops(peaks, p == Precision::kF32 ? DType::kF32 : precision_dtype(p));
    measure_inference(r, model, *sample, p, device);
    rows.push_back(std::move(r));
  }
  auto present = [&](const char* name) {
    for (const CpuPeak& c : peaks) {
      if (c.name == name) return c.present;
    }
    return false;
  };
  const std::string verdict = speed_verdict(rows, present("bf16_dot_avx512"), present("f16_fma_avx512"));
  std::fprintf(out, "\n%s\n%s", speed_table(rows).c_str(), verdict.c_str());
  const std::string json = o.report_out + "_speed.json", png = o.report_out + "_speed.png";
  if (absl::Status s = write_whole_file(json, speed_json(rows, choice_name(o.model), verdict)); !s.ok()) return s;
  try {
    plot_speed(rows, absl::StrCat(choice_name(o.model), ": where the time of a training step goes, per precision"),
               png);
  } catch (const Error& e) {
    return absl::InternalError(absl::StrCat("--report=speed: ", e.what()));
  }
  std::fprintf(out, "\nwrote %s and %s\n", json.c_str(), png.c_str());
  RunSummary summary;
  summary.steps = 0;
  return summary;
}

// --report=memory: one step's memory by part in fp32, bf16 and fp16 (with the optimizer's working copies, as
// the Trainer keeps them), and for the GPT with each block recomputed in backward; with --memory_budget, the
// largest batch that fits, predicted from batch B and 2B in --precision and checked by a step at the
// prediction. Steps the model (with an lr that changes nothing the sizes depend on).
absl::StatusOr<RunSummary> memory_report_run(const RunOptions& o, const Data& data, Model& model, Optimizer& optimizer,
                                             DataLoader& train, Device device, std::FILE* out) {
  if (!device.is_cpu()) {
    return absl::UnimplementedError("--report=memory: measured with the CPU allocator's counters; run it on the CPU");
  }
  std::optional<Example> sample = train.next();
  if (!sample) return absl::FailedPreconditionError("--report=memory: the training set gave no batch");
  // A batch of `b` examples: the sample's examples repeated.
  auto batch_of = [&](int64_t b) {
    Example e;
    for (const Tensor& t : *sample) {
      std::vector<Tensor> copies(static_cast<size_t>((b + t.size(0) - 1) / t.size(0)), t);
      e.push_back(cat(copies, 0).narrow(0, 0, b).contiguous());
    }
    return e;
  };
  auto measure = [&](Model& m, Optimizer& opt, Precision p, int64_t b, std::string label) {
    opt.disable_working_copies();
    if (p != Precision::kF32) opt.enable_working_copies(precision_dtype(p));
    const Example e = batch_of(b);
    return measure_step_memory(std::move(label), b, *m.module, opt, [&] {
      PrecisionScope autocast(p, device, nullptr);
      return m.task.loss(e);
    });
  };
  std::vector<MemoryParts> rows;
  // bf16 weights (--master_weights=none) run under bf16 autocast only: the other precisions' rows would need
  // fp32 weights.
  const std::vector<Precision> precisions =
      o.master_weights == MasterWeights::kNone
          ? std::vector<Precision>{Precision::kBF16}
          : std::vector<Precision>{Precision::kF32, Precision::kBF16, Precision::kF16};
  for (Precision p : precisions) rows.push_back(measure(model, optimizer, p, o.batch_size, precision_name(p)));
  if (model.gpt && o.recompute == RecomputeMode::kNone && o.master_weights == MasterWeights::kFp32) {
    RunOptions r = o;
    r.recompute = RecomputeMode::kBlocks;
    Model recomputed = build_model(r, data);
    std::unique_ptr<Optimizer> opt = build_optimizer(r, *recomputed.module);
    for (Precision p : {Precision::kF32, Precision::kBF16}) {
      rows.push_back(measure(recomputed, *opt, p, o.batch_size, absl::StrCat(precision_name(p), " + recompute")));
    }
  }
  std::fprintf(out, "memory report: %s, one training step (forward, backward, %s step), CPU allocator counters\n\n%s",
               choice_name(o.model), choice_name(o.optimizer), memory_table(rows).c_str());
  if (o.memory_budget_mib > 0) {
    const uint64_t budget = static_cast<uint64_t>(o.memory_budget_mib * (1 << 20));
    const BatchFit fit = find_batch_for_budget(budget, o.batch_size, 16 * o.batch_size, [&](int64_t b) {
      return measure(model, optimizer, o.precision, b, "").peak;
    });
    std::fprintf(out, "\n%s, budget %s: the step peak is %s + %s per example (from batch %lld and %lld), %s\n",
                 precision_name(o.precision), format_bytes(budget).c_str(),
                 format_bytes(static_cast<uint64_t>(std::max(0.0, fit.fixed_bytes))).c_str(),
                 format_bytes(static_cast<uint64_t>(std::max(0.0, fit.bytes_per_example))).c_str(),
                 static_cast<long long>(o.batch_size), static_cast<long long>(2 * o.batch_size), fit.summary().c_str());
  }
  RunSummary summary;
  summary.steps = 0;
  return summary;
}

// The precision report's memory section: bytes per parameter of the run's precision ladder beside the fp32-master
// baseline, part by part, and what they come to for this model.
std::string ladder_memory_table(const RunOptions& o, const Module& model) {
  const int moments = o.optimizer == OptimizerKind::kSGD    ? (o.momentum != 0.0 ? 1 : 0)
                      : o.optimizer == OptimizerKind::kLion ? 1
                                                            : 2;
  const bool copies = o.precision != Precision::kF32;  // the Trainer keeps working copies of fp32 masters
  int64_t params = 0;
  for (const NamedTensor& p : model.named_parameters()) params += p.tensor.numel();
  const PrecisionLadder ladder = precision_ladder(o);
  std::string out = absl::StrFormat("memory: bytes per parameter (%s, %lld parameters)\n", choice_name(o.optimizer),
                                    static_cast<long long>(params));
  absl::StrAppendFormat(&out, "  %-76s %7s %7s %7s %7s %7s %7s %10s\n", "ladder", "weights", "copy", "grads", "state",
                        "comp", "total", "model");
  auto row = [&](const PrecisionLadder& l) {
    const BytesPerParameter b = l.bytes_per_parameter(moments, copies);
    absl::StrAppendFormat(&out, "  %-76s %7.2f %7.2f %7.2f %7.3f %7.2f %7.3f %10s\n", l.str(), b.weights,
                          b.working_copy, b.grads, b.state, b.compensation, b.total(),
                          format_bytes(static_cast<uint64_t>(b.total() * double(params))));
  };
  if (!ladder.is_default()) row(PrecisionLadder{});
  row(ladder);
  return out;
}

// --report=precision: the first training batch (from the checkpoint's position when resumed) through
// amp::precision_report at the scaler's scale (the checkpoint's, or --init_scale); the table to `out`,
// everything to <report_out>.json, the gradient histogram to <report_out>.png. Nothing is trained.
absl::StatusOr<RunSummary> precision_report_run(const RunOptions& o, Model& model, DataLoader& train, Trainer& trainer,
                                                Device device, std::FILE* out) {
  if (absl::Status folder = check_report_out(o.report_out); !folder.ok()) return folder;
  std::optional<Example> batch = train.next();
  if (!batch) return absl::FailedPreconditionError("--report=precision: the training set gave no batch");
  for (Tensor& t : *batch) t = t.to(device);
  const double scale =
      trainer.scaler().is_enabled() ? trainer.scaler().get_scale() : amp::scaler_defaults_for(DType::kF16).init_scale;
  model.module->train();
  // The report's baseline runs in fp32: bf16 weights (--master_weights=none) are widened, exactly, first. Nothing
  // trains after the report.
  const bool widened = o.master_weights == MasterWeights::kNone;
  if (widened) model.module->to(DType::kF32);
  const amp::PrecisionReport report = amp::precision_report(*model.module, [&] { return model.task.loss(*batch); },
                                                            {.device = device, .loss_scale = scale});
  std::fprintf(out, "precision report: %s, one training batch of %lld, weights and inputs in fp32%s\n\n%s",
               choice_name(o.model), static_cast<long long>((*batch)[0].size(0)),
               widened ? " (the bf16 weights widened)" : "", report.table().c_str());
  const std::string json = o.report_out + ".json";
  if (absl::Status s = write_whole_file(json, report.json()); !s.ok()) return s;
  amp::plot_gradient_histogram(report, o.report_out + ".png",
                               absl::StrCat("log2 |gradient| of ", choice_name(o.model),
                                            ", fp32 backward, unscaled and "
                                            "scaled by ",
                                            report.loss_scale));
  std::fprintf(out, "\n%s", ladder_memory_table(o, *model.module).c_str());
  std::fprintf(out, "\nwrote %s and %s.png\n", json.c_str(), o.report_out.c_str());
  return RunSummary{.final_scale = scale};
}

}  // namespace mantissa::run_parts

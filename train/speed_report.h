// "Why is mixed precision (not) faster here?": mantissa-train --report=speed runs a few profiled training
// steps of the model in fp32, bf16 and fp16 (with its GradScaler) and this file turns each profile into where
// the step's time went, then compares the precisions in a table, a verdict in words and a stacked-bar
// picture. The analysis is separate from the run, so a program of its own can profile its steps
// (framework/profiler/profiler.h) and call summarize_steps() on them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framework/profiler/profile.h"

namespace mantissa {

// Where a step's time goes. Each recorded event's self time is counted once, in the bucket of its own name or,
// inside a cast, the loss scaler, the optimizer, the loader or a collective, in that one's.
enum class TimeBucket {
  kGemm,           // matmul, conv2d, conv2d_backward, scaled_mm
  kElementwise,    // every other kernel: elementwise, copies, normalization, softmax, losses, reductions,
                   // and a backward node's own time (the kernels it runs inline)
  kCast,           // "to": autocast's casts and the copies they hold
  kScaler,         // the GradScaler: unscale_ with its inf check, update
  kOptimizer,      // the optimizer's step, gradient clipping and zero_grad
  kLoader,         // waiting for the next batch
  kCommunication,  // all-reduce and its waits
  kOther,          // the rest: the phases' own time (autograd's bookkeeping), time outside any recorded op
  kCount
};
inline constexpr int kTimeBuckets = static_cast<int>(TimeBucket::kCount);
std::string_view bucket_name(TimeBucket b);

// A GEMM's shape (the profile's matmul events: [batch, m, k] x [batch, k, n]) and its time per step.
struct GemmShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  double ms_per_step = 0;
};

// One precision's profiled steps.
struct StepProfile {
  std::string precision;  // "fp32", "bf16", "fp16"
  int64_t steps = 0;
  int64_t batch = 0;  // examples per step
  double step_ms = 0;
  std::array<double, kTimeBuckets> bucket_ms{};  // per step
  double gemm_flops = 0;                         // per step
  double gemm_peak_gflops = 0;                   // this CPU's peak for the GEMMs' arithmetic (0: unknown)
  // GEMMs with m, n or k not a multiple of 8 (16-bit tensor cores and vector units want 8; FP8 16), with
  // their time per step, slowest first.
  std::vector<GemmShape> misaligned;
  // GEMM shapes with a dim not a multiple of 16, which FP8 tensor-core GEMMs need (amp/fp8.h keeps such
  // linears out of FP8).
  int64_t gemm_shapes_not_multiple_of_16 = 0;
  uint64_t peak_bytes = 0;              // CPU memory allocated at the peak
  std::vector<std::string> peak_stack;  // what ran then
  // Inference (forward, no grad, eval mode): latency per call at batch 1, throughput at the training batch.
  double infer_p50_ms = 0, infer_p99_ms = 0, infer_samples_per_s = 0;

  double samples_per_s() const { return step_ms > 0 ? 1e3 * static_cast<double>(batch) / step_ms : 0; }
  double gemm_gflops_per_s() const;
  double share(TimeBucket b) const { return step_ms > 0 ? bucket_ms[static_cast<int>(b)] / step_ms : 0; }
};

// What `steps` profiled steps of `batch` examples say (the profile holds exactly those steps).
StepProfile summarize_steps(const profiler::Profile& profile, std::string precision, int64_t steps, int64_t batch);

// The comparison: one column per precision (the first is the reference, fp32).
std::string speed_table(const std::vector<StepProfile>& rows);
// A few sentences where the numbers support them. `cpu_has_bf16` / `cpu_has_fp16`: whether this CPU has
// dot-product / FMA instructions for those types (else their GEMMs widen to f32).
std::string speed_verdict(const std::vector<StepProfile>& rows, bool cpu_has_bf16, bool cpu_has_fp16);
std::string speed_json(const std::vector<StepProfile>& rows, std::string_view model, std::string_view verdict);
// The stacked bar per precision (ms per step by bucket) as a PNG, through gnuplot; written whole or not at
// all. Throws mantissa::Error naming the file.
void plot_speed(const std::vector<StepProfile>& rows, std::string_view title, const std::string& png);

}  // namespace mantissa

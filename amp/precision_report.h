// The precision report: what autocast does to a model, module by module, against its fp32 baseline, and
// what fp16 would do to its gradients with and without loss scaling. One batch, the weights and inputs
// kept in fp32: the loss function runs once in fp32 (the baseline), then once under autocast per
// precision asked for, with a forward hook on every module of the tree (Module::named_modules) recording
// the dtypes going in and out and the output values. The baseline's backward then gives the gradients of
// every parameter and of every module output (the activation gradients), which are counted against
// fp16's range unscaled and at the loss scale (amp/precision_stats.h), and drawn as one histogram of
// log2|gradient| before and after scaling: Figure 3 of Micikevicius et al., "Mixed Precision Training"
// (ICLR 2018), for the user's own model. PyTorch users write this tooling by hand; here it is one call
// (and `mantissa-train --report=precision`).
//
// The model is left as it was: its parameters' .grad, its buffers (BatchNorm's running statistics) and the
// default generator's state are restored after the runs, and each run starts from the same generator state,
// so that dropout draws the same masks in every precision.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "amp/precision_stats.h"
#include "framework/module.h"

namespace mantissa::amp {

struct PrecisionReportOptions {
  // Run under autocast besides the fp32 baseline; f32 here is a second fp32 run (it must differ from the
  // baseline by exactly 0: the runs are deterministic and the model's state is reset between them).
  std::vector<DType> precisions = {DType::kBF16, DType::kF16};
  Device device = kCPU;       // the autocast device (the model's)
  double loss_scale = 65536;  // the scale the gradients are judged at (a GradScaler's get_scale())
};

// One precision of one module call.
struct ModulePrecision {
  std::string precision;  // "f32" (the baseline), "bf16", "f16"
  std::vector<std::string> input_dtypes, output_dtypes;
  double max_abs_diff = 0;  // max |out - out_f32| over the outputs' elements
  double max_rel_diff = 0;  // max_abs_diff / max |out_f32| (normwise: elementwise ratios blow up near 0)
  RangeFractions range;     // of the outputs' values
};

// One call of one module's forward (a module called twice has two rows, call 0 and 1).
struct ModuleRow {
  std::string path;  // dotted, "" for the root
  std::string type;  // Module::type_name()
  int call = 0;
  std::vector<std::string> parameter_dtypes;  // of its own parameters (the masters: f32 in every precision)
  std::vector<ModulePrecision> precisions;    // [0] is the f32 baseline
};

// One gradient of the baseline's backward.
struct GradientRow {
  std::string name;  // a parameter's dotted name, or "<module path> output"
  bool activation = false;
  ScaledUnderflow unscaled;  // what fp16 would do to it as is
  ScaledUnderflow scaled;    // ... and multiplied by the loss scale
};

struct PrecisionReport {
  std::vector<ModuleRow> modules;      // in the order the calls finished (children before their parents)
  std::vector<GradientRow> gradients;  // parameters first, then activations in backward order
  double loss = 0;                     // of the baseline
  std::vector<std::pair<std::string, double>> losses;  // per precision
  double loss_scale = 0;
  double max_abs_gradient = 0;     // over every gradient row
  double suggested_scale = 0;      // suggested_loss_scale(max_abs_gradient)
  Log2Histogram unscaled, scaled;  // log2|g| over every gradient row, before and after the loss scale

  std::string table() const;  // for a person: the module table, then the gradient table and the advice
  std::string json() const;   // everything, one JSON object
  // gnuplot data for the histogram picture: "exponent unscaled_count scaled_count" per line.
  std::string histogram_data() const;
};

// Runs loss_fn (the model's forward and loss on one batch, returning the 0-d loss) in fp32 and under
// autocast per options.precisions, and backward once in fp32, as described above.
PrecisionReport precision_report(Module& model, const std::function<Tensor()>& loss_fn,
                                 const PrecisionReportOptions& options = {});

// Writes the histogram picture as a PNG with gnuplot (log2|gradient| before and after scaling, with fp16's
// normal and subnormal ranges, its flush-to-zero and overflow limits and bf16's range marked). Throws an
// Error naming the problem when gnuplot is missing or fails; never leaves a half-written file at `png`.
void plot_gradient_histogram(const PrecisionReport& report, const std::string& png, const std::string& title);

}  // namespace mantissa::amp

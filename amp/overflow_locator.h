// OverflowLocator: a debug aid for skipped steps. It instruments one backward and names the first op whose
// backward produced a non-finite gradient, the module it belongs to and the largest finite magnitude that
// op received, e.g. "step 812: backward of Softmax in blocks.3.attn produced inf (f16; max |x| before: 6.1e+04)".
//
//   amp::OverflowLocator locator(model);
//   Tensor scaled = scaler.scale(loss);
//   locator.watch(scaled, step);         // after the forward, before backward
//   scaled.backward();
//   if (locator.finding()) std::cerr << locator.finding()->message << "\n";
//
// The forward can be watched too: call begin_forward(step) before the forward; an op whose output turns
// non-finite is then named as "forward of <op>" (the largest finite |x| in that output is reported).
// Without begin_forward, a forward activation that overflows shows up as the backward of the op after it.
// Module attribution: an op belongs to the module of the nearest parameters below it in the graph (their
// common dotted prefix), so a parameter-free op (softmax) is named after the layer that feeds it.
//
// FP8 (amp/fp8.h): watch_fp8(context) adds the casts of the FP8 linears. A cast whose values overflow the
// format is not a non-finite gradient (by default it saturates to the format's max, silently losing the
// top of the range), so it gets findings of its own: fp8_findings() names every linear and role whose
// overflow counter moved since the step began, e.g. "step 7: FP8 cast of grad_output in blocks.0.mlp.c_fc
// (blocks.0.mlp.c_fc.weight) overflowed E5M2 in 12 elements (saturated to +-57344; scale now 1.0e+00)".
// With a non-saturating backward (Fp8Recipe::backward_overflow) the overflow becomes inf, which finding()
// reports as well, as the backward of Fp8Linear.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/float8.h"
#include "framework/module.h"

namespace mantissa::amp {

class Fp8Context;

struct OverflowFinding {
  int64_t step = 0;
  std::string op;               // the node's name without "Backward" ("Linear", "Softmax"); "a or b" when two ops
                                // fed the same gradient and only their sum is seen
  std::string module;           // dotted module name; "" for the model's root module
  std::string value;            // "inf" or "nan"
  DType dtype = DType::kF32;    // of the non-finite gradient
  double max_abs_before = 0.0;  // the largest finite |gradient| the op received
  std::string message;
};

// One FP8 role of one linear that overflowed its format during the watched step.
struct Fp8OverflowFinding {
  int64_t step = 0;
  std::string module;  // the linear's dotted module name ("" for the root)
  std::string param;   // its weight's parameter name
  std::string role;    // input, weight or grad_output
  DType dtype = DType::kF8E4M3;
  Fp8Overflow overflow = Fp8Overflow::kSaturate;  // what the overflowed values became
  int64_t count = 0;                              // elements that overflowed in this step
  double scale = 0.0;                             // the role's scale when fp8_findings() read it
  std::string message;
};

class OverflowLocator {
 public:
  explicit OverflowLocator(const Module& model);
  ~OverflowLocator();
  OverflowLocator(const OverflowLocator&) = delete;
  OverflowLocator& operator=(const OverflowLocator&) = delete;
  // Checks the output of every differentiable op of the forward that follows, on this thread, until
  // watch() (or the locator's destruction) ends it. Clears the last finding.
  void begin_forward(int64_t step);
  // Adds a check on the gradient entering every node of root's graph and clears the last finding (except
  // one the forward of the same step found). Call after the forward and before backward, once per graph.
  void watch(const Tensor& root, int64_t step);
  // The first non-finite gradient of the watched backward, or nullopt when all were finite.
  const std::optional<OverflowFinding>& finding() const;

  // Also watch the FP8 casts of `context` (which must outlive the locator's use of it). Their counters are
  // read when begin_forward starts a step (or watch, for a step without begin_forward), and again by
  // fp8_findings(): call it after the backward (and before Fp8Context::step(), to see the scales the step
  // cast with). Host reads: a debugging aid, like the rest of the locator.
  void watch_fp8(const Fp8Context& context);
  // One finding per linear and role whose overflow counter moved since the step began, in the context's
  // order; empty when none did (or when no context is watched).
  std::vector<Fp8OverflowFinding> fp8_findings() const;

  struct Shared;  // state the hooks share (public for the .cc's helpers)

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace mantissa::amp

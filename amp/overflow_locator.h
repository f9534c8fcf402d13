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
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "framework/autograd.h"
#include "framework/module.h"

namespace mantissa::amp {

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

  struct Shared;  // state the hooks share (public for the .cc's helpers)

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace mantissa::amp

// FP8 training: which linears of a model run in FP8, their scaling state, and the guard that routes linear()
// through FP8 (issue 20). The recipe is data (amp/fp8_recipe.h), the per-tensor update math is in
// amp/fp8_scaling.h, the autograd function in amp/fp8_linear.h; the kernels are ops/fp8/fp8.h's.
//
//   amp::Fp8Context fp8(model, amp::Fp8Recipe::delayed(), {.exclude = {"head"}});
//   for (...) {
//     {
//       amp::AutocastGuard autocast({.dtype = DType::kBF16});  // the other ops in bf16
//       amp::Fp8Guard guard(fp8);                              // the managed linears in FP8
//       loss = cross_entropy(model.forward(x), y);
//     }
//     loss.backward();
//     opt.step();
//     fp8.step();  // new delayed scales from the amax histories; device ops only
//   }
//
// Which linears: the (f32, f16 or bf16) weight of every Linear module (type_name() "Linear") whose in and out
// features are both multiples of 16 (cuBLASLt's FP8 rule, also Transformer Engine's), minus Fp8Options::exclude. The
// weight is recognised by identity when ops::linear receives it (the parameter itself, before autocast casts it), so
// the managed set is fixed at construction; any other linear() (a classifier head with 10 outputs, a raw
// parameter, a tied embedding) takes the ordinary path, under autocast if one is open.
//
// State for checkpoints: per managed weight and role "<param name>/<role>/amax_history" ([N] f32, newest
// first: entry 0 is the current step's, entry k the step k before), "<param name>/<role>/scale" (0-d f32) and
// "<param name>/<role>/overflow" and ".../underflow" (0-d f64: the role's saturated and flushed-to-zero elements in
// the run so far; a per-tensor recipe's checkpoint from before underflows were counted loads with 0), roles input,
// weight, grad_output, on the state's device; and "step" (0-d i64 on the CPU, the steps taken). Recipes that
// round stochastically add "<param name>/rounding" ([2] i64 on the CPU: the Philox key and the casts rounded so
// far). Loading it continues the run bit for bit, its statistics included.
//
// Decided here where TE and torchao leave room: a forward with grad mode off (evaluation) leaves the state
// alone; step() runs after every optimizer step, skipped ones included (TE updates at every iteration too);
// dynamic roles keep a one-entry history (the step's largest amax, for stats) and the last cast's scale.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "amp/fp8_linear.h"
#include "amp/fp8_recipe.h"
#include "framework/module.h"
#include "ops/fp8/accumulator.h"
#include "ops/fp8/fp8.h"

namespace mantissa::amp {

struct Fp8Options {
  // Parameter names or dotted prefixes ("head", "blocks.0.mlp") whose linears stay off FP8. Each must name
  // something in the model: a typo is an error, not a silently included layer.
  std::vector<std::string> exclude;
  // How the CPU's FP8 GEMMs sum their products while an Fp8Guard of the context lives (ops/fp8/accumulator.h:
  // full f32, or Hopper's tensor core bit for bit). A GPU's scaled_mm runs its tensor core and ignores it.
  Fp8Accumulator accumulator = Fp8Accumulator::f32();
  // Stochastic rounding's Philox key (nvfp4 and mxfp4 with sr=1): linear i of the model draws from a key made of
  // this seed and i (mantissa-train passes --seed). Saved in state_dict with the count of rounded casts.
  uint64_t seed = 0;
};

class Fp8Context {
 public:
  // The state of each managed linear is created on its weight's device (history 0, scale 1).
  Fp8Context(const Module& model, Fp8Recipe recipe, Fp8Options options = {});
  ~Fp8Context();
  Fp8Context(const Fp8Context&) = delete;  // a guard holds a pointer to it
  Fp8Context& operator=(const Fp8Context&) = delete;

  const Fp8Recipe& recipe() const { return recipe_; }
  // Whether the recipe rounds stochastically (its state then carries each linear's rounding key and count).
  bool rounds() const { return recipe_.fp4() && recipe_.stochastic_rounding; }
  const Fp8Accumulator& accumulator() const { return accumulator_; }
  // Parameter names of the FP8 linears' weights, in the model's parameter order.
  const std::vector<std::string>& managed() const { return managed_; }
  bool manages(const Tensor& weight) const;
  // The state of a managed weight, by parameter name (throws for another name): for tests and tools.
  const Fp8LinearState& state(const std::string& name) const;

  // The end of an optimizer step (after opt.step()): every role's new scale and rolled history. Device ops
  // only, no host read. Call it once per optimizer step, also when the step was skipped (TE does the same:
  // the amaxes were seen whether or not the update was applied).
  void step();
  int64_t steps() const { return steps_; }
  // Overflowed elements of every cast in the run (since construction, plus a loaded state's), a 0-d i64 on the device
  // (the first managed weight's; CPU with none), computed from the counters without a host read.
  Tensor overflow_total() const;

  std::vector<NamedTensor> state_dict() const;  // copies: a later step() does not change them
  // Checks everything first (names, shapes, the recipe's history lengths, the step counter) and throws a
  // mantissa::Error naming what differs; loads nothing unless all of it fits.
  void load_state_dict(const std::vector<NamedTensor>& state);

  struct TensorStats {
    std::string name;       // the weight's parameter name
    std::string role;       // input, weight, grad_output
    double scale;           // what the next cast multiplies by (delayed); the last cast's (dynamic)
    double amax;            // the amax the last step() used (the history's max, or the current entry)
    int64_t overflow;       // overflowed elements in the run (since construction, plus a loaded state's)
    DType dtype;            // the role's FP8 format (FP4 recipes: E4M3, the storage of their E2M1 values)
    int64_t underflow = 0;  // finite non-zero elements cast to 0 in the run
  };
  // Host reads: for reports, logs and tests.
  std::vector<TensorStats> stats() const;

  // Moves the state to `device` (call it with Module::to).
  void to(Device device);

 private:
  friend class Fp8Guard;
  class Override;

  Fp8Recipe recipe_;
  Fp8Accumulator accumulator_;
  std::vector<std::string> managed_;
  std::vector<std::shared_ptr<Fp8LinearState>> states_;  // parallel to managed_
  std::vector<Tensor> weights_;                          // held, so that no other tensor takes their address
  std::unordered_map<const TensorImpl*, size_t> by_weight_;
  int64_t steps_ = 0;
  std::unique_ptr<Override> override_;
};

// Routes ops::linear through FP8 for the context's managed weights on this thread while it lives; restores
// the override that was installed before it (guards nest).
class Fp8Guard {
 public:
  explicit Fp8Guard(Fp8Context& context);
  ~Fp8Guard();
  Fp8Guard(const Fp8Guard&) = delete;
  Fp8Guard& operator=(const Fp8Guard&) = delete;

 private:
  LinearOverride* previous_;
  Fp8AccumulatorScope accumulator_;
};

}  // namespace mantissa::amp

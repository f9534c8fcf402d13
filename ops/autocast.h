// Autocast as the ops apply it: each op's entry point hands its descriptor (ops/op.h) to cast_inputs, which
// casts the inputs by the descriptor's category for their device when autocast is on (amp/autocast.h: the
// guard, the thread's state, the weight-cast cache); policy_for and policy_table are views of the
// descriptors, and register_op gives an op defined outside the library a place among them.
#pragma once

#include <string_view>
#include <vector>

#include "amp/autocast.h"  // IWYU pragma: export
#include "framework/tensor.h"
#include "ops/op.h"

namespace mantissa::amp {

// Gives an op defined outside the library (a custom Function, ops/function.h, or the user's own entry
// point that calls cast_inputs(descriptor, ...)) a place in the autocast policy without editing the
// library: from then on policy_for, policy_table and the by-name cast_inputs know it as they know the
// built-in ops. The descriptor must outlive its use (declare it `inline constexpr`, as MT_OP does). Its
// name must be new: a second op of a built-in's or a registered op's name throws. Returns true, so that a
// namespace-scope `const bool registered = amp::register_op(my_op);` registers it at start-up.
bool register_op(const OpInfo& op);
// The ops given to register_op, in order.
std::vector<const OpInfo*> registered_ops();

// The category of the op named `op` for tensors on `device`, by its descriptor (kNone for an op without one).
CastPolicy policy_for(std::string_view op, DeviceType device);
struct PolicyEntry {
  std::string_view op;
  DevicePolicies policy;
};
// Every op whose category is not kNone on some device, in the order of all_ops() followed by the registered
// ops: a view of the descriptors, for documentation and tests.
std::vector<PolicyEntry> policy_table();
std::string_view policy_name(CastPolicy p);

// Applies op's policy to its tensor inputs when autocast is active for their device; returns the inputs
// to run the op on (the same handles when nothing is cast). Undefined tensors pass through.
std::vector<Tensor> cast_inputs(const OpInfo& op, std::vector<Tensor> inputs);
// One-input form.
Tensor cast_input(const OpInfo& op, const Tensor& input);
// The same by op name, with the categories looked up (tests, and ops outside the library).
std::vector<Tensor> cast_inputs(std::string_view op, std::vector<Tensor> inputs);
Tensor cast_input(std::string_view op, const Tensor& input);

}  // namespace mantissa::amp

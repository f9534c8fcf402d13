// Module: a node in a tree of layers owning named parameters (leaf tensors that require grad, the fp32
// masters), buffers (state that is saved but not trained, e.g. BatchNorm's running statistics) and child
// modules. Names follow PyTorch's state_dict: dotted paths in registration order ("0.weight",
// "encoder.layers.1.bias"), so optimizer state, checkpoints and PyTorch interop key on the same strings.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/tensor.h"

namespace mantissa {

// A tensor with its dotted name: a parameter or a buffer of a module tree.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// load_state_dict: kStrict requires the names to match exactly; kNonStrict loads the names both sides
// have and reports the rest.
enum class LoadStrictness { kStrict, kNonStrict };

struct LoadResult {
  std::vector<std::string> missing;     // in the module, not in the state
  std::vector<std::string> unexpected;  // in the state, not in the module
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;  // parameters are shared handles: a copy would alias them silently
  Module& operator=(const Module&) = delete;

  // The class name for messages and printing ("Linear"); layers override it.
  virtual std::string type_name() const { return "Module"; }

  // Registers `value` as parameter `name` and returns it, now requiring grad. `value` must be a leaf
  // of a floating dtype (detach() it if it has history). Names are unique within a module and have no '.'.
  Tensor register_parameter(const std::string& name, Tensor value);
  // Registers a buffer: saved in state_dict(), never trained. Any dtype (num_batches_tracked is i64).
  Tensor register_buffer(const std::string& name, Tensor value);
  // Registers `module` as child `name` and returns it.
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: M must derive from Module");
    add_child(name, module);
    return module;
  }

  // Every parameter of the tree, dotted names, registration order (own first, then each child's).
  // A tensor registered under two names (weight tying) appears once, under its first name, as in PyTorch.
  std::vector<NamedTensor> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<NamedTensor> named_buffers() const;
  // This module's direct children, in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  std::vector<std::shared_ptr<Module>> children() const;
  // The child registered as `name` (not dotted); throws when there is none.
  std::shared_ptr<Module> child(const std::string& name) const;

  // Training mode (the default) or evaluation mode, for this module and all its descendants. Dropout
  // and BatchNorm read it.
  void train();
  void eval();
  bool is_training() const { return training_; }

  // Sets every parameter's grad to undefined (PyTorch's set_to_none=True default): the next backward
  // writes fresh gradients instead of adding to stale ones.
  void zero_grad();

  // Parameters and buffers by dotted name, in order, detached (sharing storage with the module).
  std::vector<NamedTensor> state_dict() const;
  // Copies each named tensor into the module's parameter or buffer of that name (in place, converting
  // the dtype; the shapes must match). kStrict throws, before copying anything, when a name is missing
  // or unexpected; kNonStrict returns those names instead.
  LoadResult load_state_dict(const std::map<std::string, Tensor>& state,
                             LoadStrictness strictness = LoadStrictness::kStrict);
  LoadResult load_state_dict(const std::vector<NamedTensor>& state,
                             LoadStrictness strictness = LoadStrictness::kStrict);

  // Moves every parameter and buffer of the tree (and the parameters' grads) to `device`, in place: each
  // tensor keeps its identity, so the handles layers and optimizers hold see the move, and its name, leaf
  // status and requires_grad. Tensors come out contiguous; two distinct tensors that shared storage (a
  // buffer viewing a parameter) no longer do. Throws, before moving anything, when `device` is a GPU this
  // process cannot use. Autocast ignores a registered working copy left on the old device; call the
  // optimizer's refresh_working_copies() (or create the optimizer after the move).
  Module& to(Device device);

  // The tree, one module per line with its parameter shapes.
  std::string str() const;

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name, const char* what) const;
  void set_training(bool training);
  // Calls fn(prefix + name, tensor) for own entries of `list`, then recurses into children.
  template <typename F>
  void visit(const std::string& prefix, bool parameters, F&& fn) const;
  void print(std::string& out, const std::string& name, int depth) const;

  std::vector<NamedTensor> parameters_;
  std::vector<NamedTensor> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace mantissa

// Module: registration, dotted-name traversal, train/eval, zero_grad and state_dict loading (the hooks are in
// module_hooks.cc).
#include "framework/module.h"

#include <ostream>
#include <set>
#include <unordered_set>

#include "framework/autograd.h"
#include "framework/cuda/device.h"
#include "framework/error.h"

namespace mantissa {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + ("'" + n + "'");
  return out;
}

// Points `t`'s TensorImpl at a copy of its data on `device` (contiguous, offset 0).
void move_storage(const Tensor& t, Device device) {
  if (t.device() == device) return;
  const Tensor moved = empty(t.shape(), {.dtype = t.dtype(), .device = device});
  copy_(moved, t);
  TensorImpl* impl = t.impl();
  impl->storage = moved.storage();
  impl->strides = moved.strides();
  impl->offset = 0;
}

// Points `t`'s TensorImpl at a copy of its data converted to `dtype` (contiguous, offset 0).
void convert_storage(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype || !is_floating(t.dtype())) return;
  const Tensor converted = empty(t.shape(), {.dtype = dtype, .device = t.device()});
  copy_(converted, t);
  TensorImpl* impl = t.impl();
  impl->storage = converted.storage();
  impl->strides = converted.strides();
  impl->offset = 0;
  impl->dtype = dtype;
}

}  // namespace

void Module::check_new_name(const std::string& name, const char* what) const {
  MT_CHECK(!name.empty(), type_name(), ".register_", what, ": the name is empty. HINT: name it as in PyTorch");
  MT_CHECK(name.find('.') == std::string::npos, type_name(), ".register_", what, ": name '", name,
           "' contains '.'. HINT: dots separate the levels of dotted names; register a child module instead");
  for (const auto& p : parameters_)
    MT_CHECK(p.name != name, type_name(), ".register_", what, ": '", name, "' is already a parameter");
  for (const auto& b : buffers_)
    MT_CHECK(b.name != name, type_name(), ".register_", what, ": '", name, "' is already a buffer");
  for (const auto& c : children_)
    MT_CHECK(c.first != name, type_name(), ".register_", what, ": '", name, "' is already a child module");
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name(name, "parameter");
  MT_CHECK(value.defined(), type_name(), ".register_parameter: '", name, "' is undefined. HINT: leave an absent ",
           "parameter (a bias=false Linear) unregistered");
  MT_CHECK(is_floating(value.dtype()), type_name(), ".register_parameter: '", name, "' must be floating, got ",
           dtype_name(value.dtype()), ". HINT: integer state belongs in register_buffer");
  MT_CHECK(value.is_leaf(), type_name(), ".register_parameter: '", name, "' ", shape_str(value.shape()),
           " has autograd history. HINT: register value.detach()");
  value.set_requires_grad(true);
  parameters_.push_back({name, value});
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  check_new_name(name, "buffer");
  MT_CHECK(value.defined(), type_name(), ".register_buffer: '", name, "' is undefined");
  buffers_.push_back({name, value});
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "module");
  MT_CHECK(module != nullptr, type_name(), ".register_module: '", name, "' is null");
  MT_CHECK(module.get() != this, type_name(), ".register_module: '", name, "' is the module itself");
  children_.emplace_back(name, std::move(module));
}

template <typename F>
void Module::visit(const std::string& prefix, bool parameters, F&& fn) const {
  // An explicit stack keeps the walk iterative; children are pushed in reverse so they pop in order.
  struct Item {
    const Module* module;
    std::string prefix;
  };
  std::vector<Item> stack{{this, prefix}};
  while (!stack.empty()) {
    Item item = std::move(stack.back());
    stack.pop_back();
    for (const auto& e : parameters ? item.module->parameters_ : item.module->buffers_)
      fn(item.prefix + e.name, e.tensor);
    const auto& kids = item.module->children_;
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      stack.push_back({it->second.get(), item.prefix + it->first + "."});
  }
}

std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> out;
  std::unordered_set<const TensorImpl*> seen;
  visit("", true, [&](std::string name, const Tensor& t) {
    if (seen.insert(t.impl()).second) out.push_back({std::move(name), t});
  });
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& p : named_parameters()) out.push_back(std::move(p.tensor));
  return out;
}

std::vector<NamedTensor> Module::named_buffers() const {
  std::vector<NamedTensor> out;
  std::unordered_set<const TensorImpl*> seen;
  visit("", false, [&](std::string name, const Tensor& t) {
    if (seen.insert(t.impl()).second) out.push_back({std::move(name), t});
  });
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& c : children_) out.push_back(c.second);
  return out;
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& c : children_)
    if (c.first == name) return c.second;
  std::vector<std::string> names;
  for (const auto& c : children_) names.push_back(c.first);
  MT_THROW(type_name(), ".child: no child module '", name, "'; the children are [", join(names), "]");
}

std::vector<NamedModule> Module::named_modules() {
  // Preorder with an explicit stack, children pushed in reverse so they pop in order; a module already
  // listed is skipped with its subtree, as PyTorch's memo does.
  std::vector<NamedModule> out;
  std::unordered_set<const Module*> seen;
  std::vector<NamedModule> stack{{"", this}};
  while (!stack.empty()) {
    NamedModule item = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(item.module).second) continue;
    const auto& kids = item.module->children_;
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      stack.push_back({item.name.empty() ? it->first : item.name + "." + it->first, it->second.get()});
    out.push_back(std::move(item));
  }
  return out;
}

void Module::set_training(bool training) {
  std::vector<Module*> stack{this};
  while (!stack.empty()) {
    Module* m = stack.back();
    stack.pop_back();
    m->training_ = training;
    for (auto& c : m->children_) stack.push_back(c.second.get());
  }
}

Module& Module::to(Device device) {
  if (device.is_cuda()) {
    const int count = cuda_device_count();
    MT_CHECK(device.index >= 0 && device.index < count, type_name(), ".to(", device.str(), "): no such CUDA device (",
             count, " present", count == 0 ? ": " + cuda_unavailable_reason() : "",
             "). HINT: run on a machine with an NVIDIA GPU and a build with -DMANTISSA_CUDA=ON, or stay on the CPU");
  }
  for (const NamedTensor& p : named_parameters()) {
    move_storage(p.tensor, device);
    if (p.tensor.grad().defined()) move_storage(p.tensor.grad(), device);
  }
  for (const NamedTensor& b : named_buffers()) move_storage(b.tensor, device);
  return *this;
}

Module& Module::to(DType dtype) {
  MT_CHECK(is_floating(dtype), type_name(), ".to(", dtype_name(dtype), "): parameters are floating; pass f32, f64, ",
           "f16 or bf16");
  for (const NamedTensor& p : named_parameters()) {
    convert_storage(p.tensor, dtype);
    if (p.tensor.grad().defined()) convert_storage(p.tensor.grad(), dtype);
  }
  for (const NamedTensor& b : named_buffers()) convert_storage(b.tensor, dtype);
  return *this;
}

void Module::train() { set_training(true); }
void Module::eval() { set_training(false); }

void Module::zero_grad() {
  for (auto& p : named_parameters()) p.tensor.set_grad(Tensor());
}

std::vector<NamedTensor> Module::state_dict() const {
  // PyTorch's order: each module's parameters, then its buffers, then its children.
  std::vector<NamedTensor> out;
  std::vector<std::pair<const Module*, std::string>> stack{{this, ""}};
  while (!stack.empty()) {
    auto [m, prefix] = std::move(stack.back());
    stack.pop_back();
    for (const auto& p : m->parameters_) out.push_back({prefix + p.name, p.tensor.detach()});
    for (const auto& b : m->buffers_) out.push_back({prefix + b.name, b.tensor.detach()});
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(it->second.get(), prefix + it->first + ".");
  }
  return out;
}

LoadResult Module::load_state_dict(const std::map<std::string, Tensor>& state, LoadStrictness strictness) {
  const std::vector<NamedTensor> own = state_dict();
  LoadResult result;
  std::set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      result.missing.push_back(name);
      continue;
    }
    MT_CHECK(it->second.defined(), "load_state_dict: '", name, "' is undefined in the state");
    MT_CHECK(it->second.shape() == t.shape(), "load_state_dict: shape mismatch for '", name, "': the state has ",
             shape_str(it->second.shape()), ", the module ", type_name(), " has ", shape_str(t.shape()),
             ". HINT: build the module with the sizes the state was saved with");
  }
  for (const auto& [name, t] : state)
    if (!own_names.contains(name)) result.unexpected.push_back(name);
  if (strictness == LoadStrictness::kStrict) {
    MT_CHECK(result.missing.empty() && result.unexpected.empty(), "load_state_dict: error loading into ", type_name(),
             ": missing names [", join(result.missing), "], unexpected names [", join(result.unexpected),
             "]. HINT: names are PyTorch's dotted state_dict names; pass LoadStrictness::kNonStrict to load a subset");
  }
  // Everything checked: copy in place, so handles the layers hold (and optimizers key on) stay valid.
  NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    auto it = state.find(name);
    if (it != state.end()) copy_(t, it->second);
  }
  return result;
}

LoadResult Module::load_state_dict(const std::vector<NamedTensor>& state, LoadStrictness strictness) {
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, t] : state)
    MT_CHECK(by_name.emplace(name, t).second, "load_state_dict: '", name, "' appears twice in the state");
  return load_state_dict(by_name, strictness);
}

void Module::print(std::string& out, const std::string& name, int depth) const {
  out += std::string(2 * depth, ' ') + (name.empty() ? "" : name + ": ") + type_name();
  for (const auto& p : parameters_) out += " " + p.name + shape_str(p.tensor.shape());
  out += "\n";
  for (const auto& [n, c] : children_) c->print(out, n, depth + 1);
}

std::string Module::str() const {
  std::string out;
  print(out, "", 0);
  return out;
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

}  // namespace mantissa

// Custom functions (ops/function.h): the forward's scope and the node that runs the user's backward.
#include "ops/function.h"

#include <string>
#include <utility>

#include "framework/autocast_state.h"
#include "framework/error.h"

namespace mantissa {
namespace detail {

class FunctionNode final : public Node {
 public:
  FunctionNode(std::string_view function, const FunctionOptions& options, BackwardFn backward, size_t arg_count)
      : ctx(this),
        function_(function),
        name_(std::string(function) + "Backward"),
        options_(options),
        backward_(backward),
        arg_count_(arg_count) {}

  std::string_view name() const override { return name_; }
  bool supports_create_graph() const override { return !options_.once_differentiable; }
  bool materialize_grads() const override { return ctx.materialize_grads_; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    // The engine runs a create_graph backward with grad mode on. A saved intermediate has no history back to
    // the inputs (the forward recorded nothing), so a gradient computed from it would be silently short of
    // the terms through it: refused.
    MT_CHECK(!GradMode::is_enabled() || !saves_intermediate_, name_,
             " cannot differentiate its gradient (create_graph): its forward saved a tensor that is neither an "
             "input nor an output, which has no history to differentiate through. HINT: save the inputs (and "
             "outputs) and recompute the intermediate in backward");
    // One gradient per forward output; the outputs without history get none from the engine.
    std::vector<Tensor> all(outputs_.size());
    for (size_t k = 0; k < recorded_.size(); ++k) all[recorded_[k]] = std::move(grads[k]);
    if (ctx.materialize_grads_) {  // the engine has filled the recorded ones; the others

      for (size_t j = 0; j < all.size(); ++j) {
        const OutputMeta& o = outputs_[j];
        if (!all[j].defined() && o.floating) all[j] = zeros(o.shape, {.dtype = o.dtype, .device = o.device});
      }
    }
    std::vector<Tensor> result;
    {
      std::optional<amp::AutocastReplay> as_forward;
      if (options_.backward_autocast == BackwardAutocast::kAsForward) as_forward.emplace(forward_autocast_);
      result = backward_(ctx, std::move(all));
    }
    MT_CHECK(result.size() == arg_count_, function_, ": backward returned ", result.size(),
             " gradients, but forward took ", arg_count_,
             " arguments. HINT: return one per forward argument, an undefined Tensor() for those that are not "
             "Tensors or need none");
    std::vector<Tensor> out(inputs_.size());
    size_t k = 0;  // the Tensor argument next in line
    for (size_t arg = 0; arg < arg_count_; ++arg) {
      Tensor& g = result[arg];
      if (k == inputs_.size() || inputs_[k].position != arg) {
        MT_CHECK(!g.defined(), function_, ": backward returned a gradient for argument ", arg,
                 ", which is not a Tensor. HINT: return an undefined Tensor() there");
        continue;
      }
      const InputMeta& in = inputs_[k];
      if (g.defined() && next_edges[k].valid()) {
        MT_CHECK(g.shape() == in.shape, function_, ": backward returned a gradient of shape ", shape_str(g.shape()),
                 " for argument ", arg, ", whose shape is ", shape_str(in.shape),
                 ". HINT: a broadcast input's gradient is summed back to its shape (sum_to)");
        MT_CHECK(g.device() == in.device, function_, ": backward returned a gradient on ", g.device().str(),
                 " for argument ", arg, ", which is on ", in.device.str());
        MT_CHECK(is_floating(g.dtype()), function_, ": backward returned a ", dtype_name(g.dtype()),
                 " gradient for argument ", arg, "; gradients are floating");
        out[k] = g.dtype() == in.dtype ? std::move(g) : g.to(in.dtype);
      }
      ++k;
    }
    return out;
  }

  FunctionContext ctx;

 private:
  friend class FunctionCall;
  struct InputMeta {
    size_t position;  // among all the forward's arguments
    Shape shape;
    DType dtype;
    Device device;
  };
  struct OutputMeta {
    Shape shape;
    DType dtype;
    Device device;
    bool floating;
  };

  std::string_view function_;
  std::string name_;
  FunctionOptions options_;
  BackwardFn backward_;
  size_t arg_count_;
  std::vector<InputMeta> inputs_;    // one per Tensor argument (and next edge)
  std::vector<OutputMeta> outputs_;  // one per forward output
  std::vector<size_t> recorded_;     // the outputs with history, in the node's output order
  AutocastTls forward_autocast_;
  bool saves_intermediate_ = false;  // saved a floating tensor that is neither an input nor an output
};

FunctionCall::FunctionCall(std::string_view name, const FunctionOptions& options, BackwardFn backward,
                           std::vector<Tensor> tensors, std::vector<size_t> positions, size_t arg_count)
    : originals_(tensors), inputs_(std::move(tensors)), positions_(std::move(positions)) {
  MT_CHECK(!(options.cast_inputs && options.op != nullptr), name,
           ": FunctionOptions sets both cast_inputs and op. HINT: cast_inputs is custom_fwd's fixed dtype, op a "
           "category by device; choose one");
  MT_CHECK(!options.cast_inputs || is_floating(*options.cast_inputs), name,
           ": FunctionOptions::cast_inputs must be a floating dtype, got ", dtype_name(*options.cast_inputs));
  DeviceType device = DeviceType::kCPU;
  for (const Tensor& t : inputs_) {
    if (t.defined()) {
      device = t.device().type;
      break;
    }
  }
  // Cast while grad mode is on, so that the casts record and gradients reach the tensors as given.
  if (amp::is_enabled(device) && (options.cast_inputs || options.op != nullptr)) {
    if (options.op != nullptr) {
      inputs_ = amp::cast_inputs(*options.op, std::move(inputs_));
    } else {
      for (Tensor& t : inputs_) {
        if (amp::is_castable(t, device)) t = t.to(*options.cast_inputs);
      }
    }
    autocast_off_.emplace(amp::AutocastOptions{.device = device, .state = amp::AutocastState::kDisabled});
  }
  node_ = std::make_shared<FunctionNode>(name, options, backward, arg_count);
  record_ = compute_requires_grad(inputs_);
  FunctionContext& ctx = node_->ctx;
  ctx.needs_input_grad_.assign(arg_count, false);
  if (record_) {
    node_->next_edges.reserve(inputs_.size());
    for (size_t k = 0; k < inputs_.size(); ++k) {
      const Tensor& t = inputs_[k];
      node_->next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
      ctx.needs_input_grad_[positions_[k]] = node_->next_edges.back().valid();
      if (t.defined()) {
        node_->inputs_.push_back({positions_[k], t.shape(), t.dtype(), t.device()});
      } else {
        node_->inputs_.push_back({positions_[k], {}, DType::kF32, kCPU});
      }
    }
  }
  node_->forward_autocast_ = autocast_tls();
  no_grad_.emplace();
}

FunctionCall::~FunctionCall() = default;

FunctionContext& FunctionCall::ctx() { return node_->ctx; }

const Tensor& FunctionCall::input_at(size_t arg) const {
  for (size_t k = 0; k < positions_.size(); ++k) {
    if (positions_[k] == arg) return inputs_[k];
  }
  MT_THROW("custom function: argument ", arg, " is not a Tensor");  // unreachable from Function::apply
}

std::vector<Tensor> FunctionCall::finish(std::vector<Tensor> outputs) {
  FunctionContext& ctx = node_->ctx;
  ctx.in_forward_ = false;
  if (!record_) return outputs;
  const auto is_input = [&](const Tensor& t) {
    for (size_t k = 0; k < inputs_.size(); ++k) {
      if (t.is_same(inputs_[k]) || t.is_same(originals_[k])) return true;
    }
    return false;
  };
  const auto marked = [&](const Tensor& t) {
    for (const Tensor& m : ctx.non_differentiable_) {
      if (t.is_same(m)) return true;
    }
    return false;
  };
  const auto is_output = [&](const Tensor& t) {
    for (const Tensor& out : outputs) {
      if (t.is_same(out)) return true;
    }
    return false;
  };
  for (const Tensor& t : ctx.saved_values_) {
    if (t.defined() && is_floating(t.dtype()) && !is_input(t) && !is_output(t)) node_->saves_intermediate_ = true;
  }
  ctx.saved_values_.clear();
  for (size_t j = 0; j < outputs.size(); ++j) {
    Tensor& out = outputs[j];
    const bool floating = out.defined() && is_floating(out.dtype());
    node_->outputs_.push_back(out.defined() ? FunctionNode::OutputMeta{out.shape(), out.dtype(), out.device(), floating}
                                            : FunctionNode::OutputMeta{{}, DType::kF32, kCPU, false});
    if (!floating || marked(out)) continue;
    // An input returned as it is: a new handle on its data carries the history, the input keeps its own.
    if (is_input(out)) out = out.detach();
    set_history(out, node_);
    node_->recorded_.push_back(j);
  }
  ctx.non_differentiable_.clear();
  return outputs;
}

}  // namespace detail

void FunctionContext::save_for_backward(std::vector<Tensor> tensors) {
  MT_CHECK(in_forward_, "save_for_backward: call it in forward");
  MT_CHECK(!saved_once_, "save_for_backward: called twice in one forward. HINT: pass every tensor in one call");
  saved_once_ = true;
  saved_.reserve(tensors.size());
  for (Tensor& t : tensors) {
    saved_.push_back(std::make_unique<SavedTensor>(owner_, "saved_tensors"));
    if (t.defined()) *saved_.back() = t;
  }
  saved_values_ = std::move(tensors);
}

std::vector<Tensor> FunctionContext::saved_tensors() const {
  MT_CHECK(!in_forward_, "saved_tensors: call it in backward; forward has the tensors it saved");
  std::vector<Tensor> out;
  out.reserve(saved_.size());
  for (const auto& s : saved_) out.push_back(s->get());
  return out;
}

void FunctionContext::mark_non_differentiable(const std::vector<Tensor>& outputs) {
  MT_CHECK(in_forward_, "mark_non_differentiable: call it in forward, on the tensors it returns");
  non_differentiable_.insert(non_differentiable_.end(), outputs.begin(), outputs.end());
}

bool FunctionContext::needs_input_grad(size_t arg) const {
  MT_CHECK(arg < needs_input_grad_.size(), "needs_input_grad: argument ", arg, " of ", needs_input_grad_.size());
  return needs_input_grad_[arg];
}

}  // namespace mantissa

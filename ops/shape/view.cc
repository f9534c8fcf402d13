// View ops (they share storage) and conversions, each with its backward. Declared as Tensor methods
// in framework/tensor.h.
#include <numeric>
#include <optional>

#include "framework/autograd.h"
#include "framework/profiler/profiler.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

// Replaces one -1 in `shape` by the size that keeps numel; checks the total.
Shape infer_shape(const Shape& shape, int64_t numel, std::string_view op) {
  Shape out = shape;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MT_CHECK(infer < 0, op, ": only one dimension can be -1, got ", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      MT_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    MT_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape), " is invalid for ", numel,
             " elements");
    out[infer] = numel / known;
  }
  MT_CHECK(shape_numel(out) == numel, op, ": shape ", shape_str(shape), " is invalid for an input of ", numel,
           " elements");
  return out;
}

// Strides that let `new_shape` view memory laid out as (old_shape, old_strides), or nullopt when the
// view would need a copy. Groups of old dims that are contiguous with each other can be split or merged.
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape) {
  if (old_shape.empty() || shape_numel(old_shape) == 0) return contiguous_strides(new_shape);
  Shape out(new_shape.size());
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// The view nodes compute with differentiable ops (views, sum_to, to), so a create_graph backward records
// their gradients' history as it goes.
struct ReshapeBackward final : Node {
  Shape input_shape;
  std::string_view name() const override { return "ReshapeBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {g[0].reshape(input_shape)}; }
};

struct PermuteBackward final : Node {
  Shape inverse;  // inverse[dims[i]] = i
  std::string_view name() const override { return "PermuteBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {g[0].permute(inverse)}; }
};

// Where a slice, narrow or select took its view from.
struct SliceGeometry {
  Shape input_shape;
  DType dtype;
  int64_t dim, start, end, step;
  bool keep_dim;  // false for select(), which removed the dim
  // g (the view's gradient) placed into zeros of the input's shape.
  Tensor scatter(const Tensor& g) const {
    Tensor out = zeros(input_shape, {.dtype = dtype, .device = g.device()});
    copy_(out.slice(dim, start, end, step), keep_dim ? g : g.unsqueeze(dim));
    return out;
  }
  // The view of `t` (input-shaped) that the forward took: the adjoint of scatter().
  Tensor view_of(const Tensor& t) const {
    Tensor v = t.slice(dim, start, end, step);
    return keep_dim ? v : v.squeeze(dim);
  }
};

// The node of scatter() under create_graph: its gradient is the same view of the incoming gradient.
struct SliceBackwardBackward final : Node {
  SliceGeometry geometry;
  std::string_view name() const override { return "SliceBackwardBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {geometry.view_of(g[0])}; }
};

// narrow, slice and select: the gradient is zero outside the viewed region.
struct SliceBackward final : Node {
  SliceGeometry geometry;
  std::string_view name() const override { return "SliceBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    Tensor out = geometry.scatter(g[0]);
    if (compute_requires_grad({&g[0]})) {
      auto node = make_node<SliceBackwardBackward>({&g[0]});
      node->geometry = geometry;
      set_history(out, node);
    }
    return {out};
  }
};

struct ExpandBackward final : Node {
  Shape input_shape;
  std::string_view name() const override { return "ExpandBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {sum_to(g[0], input_shape)}; }
};

// The cast node: gradients go back in the input's dtype, so fp32 masters get fp32 gradients. Under
// create_graph the cast back is itself a cast node, so a second backward crosses it in the other direction.
struct ToBackward final : Node {
  DType input_dtype;
  std::string_view name() const override { return "ToBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {g[0].to(input_dtype)}; }
};

// The copy between devices: the gradient is copied back to the input's device.
struct ToDeviceBackward final : Node {
  Device input_device;
  std::string_view name() const override { return "ToDeviceBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {g[0].to(input_device)}; }
};

struct IdentityBackward final : Node {
  std::string_view name() const override { return "CloneBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {g[0]}; }
};

// Makes a view of `self` and records `node` (if grad is needed).
template <typename N>
Tensor record_view(Tensor out, std::shared_ptr<N> node) {
  if (node) set_history(out, node);
  return out;
}

template <typename N>
std::shared_ptr<N> node_if_needed(const Tensor& self) {
  return compute_requires_grad({&self}) ? make_node<N>({&self}) : nullptr;
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  const Shape target = infer_shape(shape, numel(), "view");
  std::optional<Shape> st = view_strides(this->shape(), strides(), target);
  MT_CHECK(st.has_value(), "view: shape ", shape_str(target), " is not compatible with the input's shape ",
           shape_str(this->shape()), " and strides ", shape_str(strides()),
           " (at least one dimension spans non-contiguous memory). HINT: use reshape(), which copies when needed");
  auto node = node_if_needed<ReshapeBackward>(*this);
  if (node) node->input_shape = this->shape();
  return record_view(make_view(*this, target, *st, offset()), node);
}

Tensor Tensor::reshape(const Shape& shape) const {
  const Shape target = infer_shape(shape, numel(), "reshape");
  if (view_strides(this->shape(), strides(), target).has_value()) return view(target);
  return contiguous().view(target);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int64_t s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  MT_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape target(shape().begin(), shape().begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= shape()[d];
  target.push_back(merged);
  target.insert(target.end(), shape().begin() + e + 1, shape().end());
  return reshape(target);
}

Tensor Tensor::squeeze() const {
  Shape target;
  for (int64_t d : shape()) {
    if (d != 1) target.push_back(d);
  }
  return view(target);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Shape target = shape();
  target.erase(target.begin() + d);
  return view(target);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape target = shape();
  target.insert(target.begin() + d, 1);
  return view(target);
}

Tensor Tensor::permute(const Shape& dims) const {
  const int64_t n = dim();
  MT_CHECK(static_cast<int64_t>(dims.size()) == n, "permute: got ", dims.size(), " dims ", shape_str(dims),
           " for a tensor with ", n, " dims");
  Shape new_shape(n), new_strides(n), inverse(n, -1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = wrap_dim(dims[i], n, "permute");
    MT_CHECK(inverse[d] < 0, "permute: dim ", d, " appears twice in ", shape_str(dims));
    inverse[d] = i;
    new_shape[i] = shape()[d];
    new_strides[i] = strides()[d];
  }
  auto node = node_if_needed<PermuteBackward>(*this);
  if (node) node->inverse = inverse;
  return record_view(make_view(*this, new_shape, new_strides, offset()), node);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) return *this;
  Shape perm(dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[wrap_dim(d0, dim(), "transpose")], perm[wrap_dim(d1, dim(), "transpose")]);
  return permute(perm);
}

Tensor Tensor::t() const {
  MT_CHECK(dim() <= 2, "t(): expects a tensor with at most 2 dims, got ", shape_str(shape()),
           ". HINT: use transpose(d0, d1)");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  MT_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape new_shape = shape(), new_strides = strides();
  new_shape[d] = (end - start + step - 1) / step;
  new_strides[d] *= step;
  auto node = node_if_needed<SliceBackward>(*this);
  if (node)
    node->geometry = {
        .input_shape = shape(), .dtype = dtype(), .dim = d, .start = start, .end = end, .step = step, .keep_dim = true};
  return record_view(make_view(*this, new_shape, new_strides, offset() + start * strides()[d]), node);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  MT_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: [", start, ", ", start + length,
           ") is out of range for dim ", d, " of size ", n, " (shape ", shape_str(shape()), ")");
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  const int64_t n = shape()[d];
  MT_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  Shape new_shape = shape(), new_strides = strides();
  new_shape.erase(new_shape.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  auto node = node_if_needed<SliceBackward>(*this);
  if (node)
    node->geometry = {.input_shape = shape(),
                      .dtype = dtype(),
                      .dim = d,
                      .start = index,
                      .end = index + 1,
                      .step = 1,
                      .keep_dim = false};
  return record_view(make_view(*this, new_shape, new_strides, offset() + index * strides()[d]), node);
}

Tensor Tensor::expand(const Shape& shape_in) const {
  const int64_t n = static_cast<int64_t>(shape_in.size());
  MT_CHECK(n >= dim(), "expand: cannot expand ", shape_str(shape()), " to fewer dims ", shape_str(shape_in));
  Shape new_shape(n), new_strides(n);
  const int64_t lead = n - dim();
  for (int64_t i = 0; i < n; ++i) {
    if (i < lead) {
      MT_CHECK(shape_in[i] >= 0, "expand: -1 is not allowed for a new leading dim in ", shape_str(shape_in));
      new_shape[i] = shape_in[i];
      new_strides[i] = 0;
      continue;
    }
    const int64_t have = shape()[i - lead];
    const int64_t want = shape_in[i] == -1 ? have : shape_in[i];
    MT_CHECK(have == want || have == 1, "expand: the size ", have, " at dim ", i - lead, " of ", shape_str(shape()),
             " cannot become ", want, " (only size-1 dims can be expanded)");
    new_shape[i] = want;
    new_strides[i] = have == want ? strides()[i - lead] : 0;
  }
  if (new_shape == shape()) return *this;
  auto node = node_if_needed<ExpandBackward>(*this);
  if (node) node->input_shape = shape();
  return record_view(make_view(*this, new_shape, new_strides, offset()), node);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), {.dtype = dtype(), .device = device()});
  copy_(out, *this);
  if (compute_requires_grad({this})) set_history(out, make_node<IdentityBackward>({this}));
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  profiler::RecordScope scope("to", profiler::Category::kOp, device());  // a cast: autocast's, a working copy's
  if (scope.active()) scope.add_input(*this);
  Tensor out = empty(shape(), {.dtype = target, .device = device()});
  copy_(out, *this);
  if (is_floating(target) && compute_requires_grad({this})) {
    auto node = make_node<ToBackward>({this});
    node->input_dtype = dtype();
    set_history(out, node);
  }
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  profiler::RecordScope scope("to", profiler::Category::kOp, device());
  if (scope.active()) scope.add_input(*this);
  Tensor out = empty(shape(), {.dtype = dtype(), .device = target});
  copy_(out, *this);
  if (compute_requires_grad({this})) {
    auto node = make_node<ToDeviceBackward>({this});
    node->input_device = device();
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa

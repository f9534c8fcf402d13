// Tensor: a cheap handle (one shared_ptr) to a TensorImpl: shared storage, shape, strides, offset,
// dtype, device, and the autograd fields. Views share storage. Differentiable methods (views,
// to(), clone()) are declared here and defined beside their backward in ops/shape/view.cc; the math ops
// are free functions in ops/ (add, matmul, ...). This header includes nothing from ops/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/storage.h"

namespace mantissa {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[4, 3]"

class Node;
class Tensor;

using TensorHook = std::function<Tensor(const Tensor&)>;  // returns a replacement grad or undefined
using PostAccumulateHook = std::function<void(Tensor&)>;  // sees the leaf after .grad is updated

struct AutogradMeta {
  std::shared_ptr<Tensor> grad;   // .grad of a leaf (shared so grad() can return a reference)
  std::shared_ptr<Node> grad_fn;  // the node that made this tensor; null for leaves
  uint32_t output_nr = 0;         // which output of grad_fn this tensor is
  bool requires_grad = false;
  std::weak_ptr<Node> grad_accumulator;  // a leaf's AccumulateGrad, shared by all its uses
  std::vector<TensorHook> hooks;         // leaf hooks; a non-leaf's hooks live on its grad_fn
  std::vector<PostAccumulateHook> post_accumulate_hooks;
  // A 16-bit copy that stands for this fp32 leaf in autocast's casts: the optimizer that keeps it equal
  // to the rounded master hands it over (amp::set_working_copy); autocast reads it here.
  std::shared_ptr<Tensor> working_copy;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::kF32;
  std::unique_ptr<AutogradMeta> autograd;  // created on first use
  AutogradMeta& meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
};

struct TensorOptions {
  DType dtype = DType::kF32;
  Device device = kCPU;
  bool requires_grad = false;
};

struct BackwardOptions {
  bool retain_graph = false;  // keep saved tensors so the graph can be walked again
  // Record the backward formulas (loss.backward(create_graph=True)): each leaf's grad keeps the history of
  // how it was computed, so a function of the grads can be differentiated again. Keeps the saved tensors,
  // as retain_graph does (the gradients' graph reuses them).
  bool create_graph = false;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // Metadata. Negative dims count from the end, as in PyTorch.
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t offset() const;
  int64_t dim() const;
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  size_t nbytes() const;
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const;
  bool shares_storage(const Tensor& o) const;

  // Element pointer at the tensor's offset; data<T>() checks that T matches the dtype.
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    check_dtype_for_data(dtype_v<T>);
    return static_cast<T*>(data_ptr());
  }

  // The single value of a one-element tensor (any shape with numel 1).
  double item() const;
  template <typename T>
  T item() const {
    return static_cast<T>(item());
  }

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool requires_grad);  // leaves only
  bool is_leaf() const;
  const Tensor& grad() const;  // undefined until a backward reaches this leaf
  void set_grad(const Tensor& g);
  const std::shared_ptr<Node>& grad_fn() const;
  uint32_t output_nr() const;
  // Backpropagates from this tensor. `gradient` may be omitted only for one-element tensors.
  void backward(const Tensor& gradient = Tensor(), BackwardOptions options = {}) const;
  // Same storage, no history, requires_grad false.
  Tensor detach() const;
  // Called with this tensor's gradient during backward; a defined return value replaces it.
  void register_hook(TensorHook hook) const;
  // Leaves only: called after the gradient has been accumulated into .grad.
  void register_post_accumulate_grad_hook(PostAccumulateHook hook) const;

  // Views and conversions (ops/shape/view.cc). Views share storage; a -1 in view/reshape is inferred.
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;  // a view when the strides allow, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes `dim`
  Tensor expand(const Shape& shape) const;          // -1 keeps a size; size-1 dims broadcast
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;     // this tensor when already contiguous
  Tensor to(DType dtype) const;  // this tensor when already `dtype`
  // A copy on `device` (same dtype and shape, contiguous); this tensor when already there. Differentiable:
  // the gradient goes back to this tensor's device.
  Tensor to(Device device) const;
  Tensor clone() const;

  std::string str() const;  // shape, dtype and (up to a limit) the values

 private:
  void check_dtype_for_data(DType requested) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Contiguous row-major strides for `shape`.
Shape contiguous_strides(const Shape& shape);
int64_t shape_numel(const Shape& shape);
// Wraps a possibly negative dim into [0, ndim); `op` names the caller in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op);

// A tensor over `base`'s storage with the given geometry, no autograd history. Used by view ops.
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);

// The allocator for a device; the CUDA backend registers its own.
Allocator* allocator_for(Device device);
void register_allocator(DeviceType type, Allocator* allocator);

// Factories.
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor scalar_tensor(double value, TensorOptions options = {});
// [start, end) in steps of `step`; dtype defaults to i64 when not given as floating.
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {.dtype = DType::kI64});
Tensor arange(double end, TensorOptions options = {.dtype = DType::kI64});
// Copies `values` (converted to options.dtype) into a new tensor of `shape` (default: 1-D).
template <typename T>
Tensor from_data(std::span<const T> values, const Shape& shape, TensorOptions options);
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions options = {.dtype = dtype_v<T>}) {
  if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> is bit-packed: no span over it
    const std::unique_ptr<bool[]> plain(new bool[values.size()]);
    std::copy(values.begin(), values.end(), plain.get());
    return from_data<bool>(std::span<const bool>(plain.get(), values.size()), shape, options);
  } else {
    return from_data<T>(std::span<const T>(values), shape, options);
  }
}
// 1-D tensor of `values`.
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector<T>(values, Shape{static_cast<int64_t>(values.size())});
}

// Basic kernels every layer needs (framework/copy.cc): fill, strided copy with dtype conversion,
// and same-shape accumulation (dst += src) used by the autograd engine.
void fill_(const Tensor& dst, double value);
void copy_(const Tensor& dst, const Tensor& src);  // shapes must match exactly; converts dtype
void accumulate_(const Tensor& dst, const Tensor& src);

}  // namespace mantissa

// Tensor metadata, factories and printing. Views and conversions are in ops/shape/view.cc.
#include "framework/tensor.h"

#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "framework/autograd.h"
#include "framework/cuda/allocator.h"
#include "framework/host_read.h"

namespace mantissa {

// StrCat rather than "[" + ...: GCC 12 gives a false -Wrestrict warning on operator+ with a literal.
std::string shape_str(const Shape& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op) {
  const int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1
  MT_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor with ", ndim,
           " dims (expected a dim in [", -n, ", ", n - 1, "])");
  return dim < 0 ? dim + n : dim;
}

// ---- metadata ----

#define MT_REQUIRE_DEFINED() \
  MT_CHECK(impl_ != nullptr, "tensor: this tensor is undefined (default-constructed or moved from)")

const Shape& Tensor::shape() const {
  MT_REQUIRE_DEFINED();
  return impl_->shape;
}
const Shape& Tensor::strides() const {
  MT_REQUIRE_DEFINED();
  return impl_->strides;
}
int64_t Tensor::offset() const {
  MT_REQUIRE_DEFINED();
  return impl_->offset;
}
int64_t Tensor::dim() const { return static_cast<int64_t>(shape().size()); }
int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }
int64_t Tensor::numel() const { return shape_numel(shape()); }
DType Tensor::dtype() const {
  MT_REQUIRE_DEFINED();
  return impl_->dtype;
}
Device Tensor::device() const {
  MT_REQUIRE_DEFINED();
  return impl_->storage->device();
}
size_t Tensor::nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype()); }
const std::shared_ptr<Storage>& Tensor::storage() const {
  MT_REQUIRE_DEFINED();
  return impl_->storage;
}
bool Tensor::shares_storage(const Tensor& o) const {
  return defined() && o.defined() && impl_->storage == o.impl_->storage;
}

bool Tensor::is_contiguous() const {
  const Shape& sh = shape();
  const Shape& st = strides();
  int64_t expected = 1;
  for (size_t i = sh.size(); i-- > 0;) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  MT_REQUIRE_DEFINED();
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * static_cast<int64_t>(element_size(impl_->dtype));
}

void Tensor::check_dtype_for_data(DType requested) const {
  MT_CHECK(dtype() == requested, "data<T>(): the tensor holds ", dtype_name(dtype()), " but the pointer asked for is ",
           dtype_name(requested));
}

double Tensor::item() const {
  MT_CHECK(numel() == 1, "item(): expected a tensor with one element, got shape ", shape_str(shape()), " (", numel(),
           " elements)");
  notify_host_read(HostRead::kItem);
  const Tensor host = device().is_cpu() ? *this : detach().to(kCPU);  // from a GPU: a copy, a sync point
  return dispatch_with_float8(dtype(), "item", [&]<typename T>() {
    return static_cast<double>(static_cast<compute_t<T>>(*static_cast<const T*>(host.data_ptr())));
  });
}

// ---- autograd accessors ----

bool Tensor::requires_grad() const {
  MT_REQUIRE_DEFINED();
  return impl_->autograd && impl_->autograd->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  MT_REQUIRE_DEFINED();
  MT_CHECK(is_leaf(), "set_requires_grad: only leaf tensors can change requires_grad; this one was made by ",
           "an op. HINT: use detach() to make a leaf");
  MT_CHECK(!requires_grad || is_floating(dtype()),
           "set_requires_grad: only floating tensors can require gradients, got ", dtype_name(dtype()));
  impl_->meta().requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const {
  MT_REQUIRE_DEFINED();
  return !impl_->autograd || impl_->autograd->grad_fn == nullptr;
}

const Tensor& Tensor::grad() const {
  static const Tensor kUndefined;
  MT_REQUIRE_DEFINED();
  if (!impl_->autograd || !impl_->autograd->grad) return kUndefined;
  return *impl_->autograd->grad;
}

void Tensor::set_grad(const Tensor& g) {
  MT_REQUIRE_DEFINED();
  if (g.defined()) {
    MT_CHECK(g.shape() == shape() && g.dtype() == dtype(), "set_grad: the gradient must match the tensor: got ",
             shape_str(g.shape()), " ", dtype_name(g.dtype()), " for a tensor of ", shape_str(shape()), " ",
             dtype_name(dtype()));
  }
  auto& m = impl_->meta();
  if (!g.defined()) {
    m.grad.reset();
  } else {
    m.grad = std::make_shared<Tensor>(g);
  }
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> kNone;
  MT_REQUIRE_DEFINED();
  return impl_->autograd ? impl_->autograd->grad_fn : kNone;
}

uint32_t Tensor::output_nr() const {
  MT_REQUIRE_DEFINED();
  return impl_->autograd ? impl_->autograd->output_nr : 0;
}

void Tensor::backward(const Tensor& gradient, BackwardOptions options) const {
  run_backward({*this}, {gradient}, options);
}

Tensor Tensor::detach() const {
  MT_REQUIRE_DEFINED();
  return make_view(*this, impl_->shape, impl_->strides, impl_->offset);
}

void Tensor::register_hook(TensorHook hook) const {
  MT_CHECK(requires_grad(), "register_hook: the tensor does not require grad, so no gradient will reach it");
  auto& m = impl_->meta();
  if (m.grad_fn) {
    m.grad_fn->pre_hooks.emplace_back(m.output_nr, std::move(hook));
  } else {
    m.hooks.push_back(std::move(hook));
  }
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateHook hook) const {
  MT_CHECK(requires_grad() && is_leaf(),
           "register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate a gradient");
  impl_->meta().post_accumulate_hooks.push_back(std::move(hook));
}

// ---- construction ----

namespace {
Allocator*& allocator_slot(DeviceType type) {
  static Allocator* table[2] = {cpu_allocator(), nullptr};
  return table[static_cast<int>(type)];
}
}  // namespace

Allocator* allocator_for(Device device) {
  Allocator* a = allocator_slot(device.type);
  // One caching allocator per GPU (framework/cuda/allocator.h), unless one was registered; without CUDA
  // in the build, gpu::cuda_allocator throws saying so.
  if (a == nullptr && device.is_cuda()) return gpu::cuda_allocator(device.index);
  MT_CHECK(a != nullptr, "no allocator for device ", device.str(), ": register_allocator set none");
  return a;
}

void register_allocator(DeviceType type, Allocator* allocator) { allocator_slot(type) = allocator; }

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

Tensor empty(const Shape& shape, TensorOptions options) {
  for (int64_t d : shape) {
    MT_CHECK(d >= 0, "empty: sizes must be non-negative, got ", shape_str(shape));
  }
  auto impl = std::make_shared<TensorImpl>();
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * element_size(options.dtype);
  impl->storage = std::make_shared<Storage>(nbytes, options.device, allocator_for(options.device));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = options.dtype;
  Tensor t(std::move(impl));
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor full(const Shape& shape, double value, TensorOptions options) {
  const bool rg = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(shape, options);
  fill_(t, value);
  if (rg) t.set_requires_grad(true);
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor zeros_like(const Tensor& t) { return full_like(t, 0.0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1.0); }
Tensor full_like(const Tensor& t, double value) {
  return full(t.shape(), value, {.dtype = t.dtype(), .device = t.device()});
}
Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  MT_CHECK(step != 0.0, "arange: step must be non-zero");
  MT_CHECK((end - start) / step >= 0, "arange: the range [", start, ", ", end, ") with step ", step,
           " goes the wrong way");
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = empty({n}, {.dtype = options.dtype});
  dispatch_all(options.dtype, "arange", [&]<typename T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i)
      p[i] = static_cast<T>(static_cast<compute_t<T>>(start + step * static_cast<double>(i)));
  });
  if (!options.device.is_cpu()) t = t.to(options.device);  // computed on the host, then copied
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}
Tensor arange(double end, TensorOptions options) { return arange(0.0, end, 1.0, options); }

template <typename T>
Tensor from_data(std::span<const T> values, const Shape& shape, TensorOptions options) {
  MT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_data: ", values.size(),
           " values do not fill shape ", shape_str(shape), " (", shape_numel(shape), " elements)");
  Tensor src = empty(shape, {.dtype = dtype_v<T>});
  std::copy(values.begin(), values.end(), src.data<T>());
  Tensor t = options.dtype == dtype_v<T> && options.device.is_cpu()
                 ? src
                 : empty(shape, {.dtype = options.dtype, .device = options.device});
  if (!t.is_same(src)) copy_(t, src);  // converts the dtype and/or copies to the device
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}
template Tensor from_data<float>(std::span<const float>, const Shape&, TensorOptions);
template Tensor from_data<double>(std::span<const double>, const Shape&, TensorOptions);
template Tensor from_data<Half>(std::span<const Half>, const Shape&, TensorOptions);
template Tensor from_data<BFloat16>(std::span<const BFloat16>, const Shape&, TensorOptions);
template Tensor from_data<int64_t>(std::span<const int64_t>, const Shape&, TensorOptions);
template Tensor from_data<int32_t>(std::span<const int32_t>, const Shape&, TensorOptions);
template Tensor from_data<bool>(std::span<const bool>, const Shape&, TensorOptions);

// ---- printing ----

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype());
  if (!device().is_cpu()) os << ", device=" << device().str();
  if (requires_grad()) os << ", requires_grad";
  os << ")";
  const Tensor c = device().is_cpu() ? contiguous() : detach().to(kCPU);
  const int64_t n = numel();
  constexpr int64_t kEdge = 3;  // elements shown at each end of a long tensor
  os << " [";
  dispatch_with_float8(dtype(), "print", [&]<typename T>() {
    const T* p = static_cast<const T*>(c.data_ptr());
    for (int64_t i = 0; i < n; ++i) {
      if (n > 2 * kEdge + 2 && i == kEdge) {
        os << ", ...";
        i = n - kEdge - 1;
        continue;
      }
      if (i) os << ", ";
      if constexpr (std::is_same_v<T, bool>) {
        os << (p[i] ? "true" : "false");
      } else {
        os << std::setprecision(6) << static_cast<compute_t<T>>(p[i]);
      }
    }
  });
  os << "]";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace mantissa

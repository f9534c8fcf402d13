// cat, stack, split, index_select, gather, one_hot and the backward of the differentiable ones:
// cat's gradient is narrowed back per input, index_select's and gather's are scatter-adds. CUDA tensors
// take cat/stack/split through copy_ and views, the index ops through ops/shape/shape_cuda.h.
#include "ops/shape/shape.h"

#include <algorithm>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "ops/autocast.h"
#include "ops/shape/shape_cpu.h"
#include "ops/shape/shape_cuda.h"

namespace mantissa {
namespace {

// The accumulation dtype of the scatter-adds: f32 for 16-bit (rounded once at the end), else the dtype.
DType compute_dtype(DType d) { return is_low_precision(d) ? DType::kF32 : d; }

// `index` as a contiguous i64 tensor on `device`. CPU indices are range-checked (no synchronization
// needed); device indices are not (the kernels turn an out-of-range index into NaN / 0 / a dropped add).
Tensor index_on(const Tensor& index, int64_t limit, Device device, std::string_view op, std::string_view what) {
  if (index.device().is_cpu()) {
    const Tensor checked = cpu::checked_index(index, limit, op, what);
    return device.is_cpu() ? checked : checked.to(device);
  }
  MT_CHECK(index.device() == device, op, ": the index is on ", index.device().str(), " but the input is on ",
           device.str(), ". HINT: move the index to the input's device");
  MT_CHECK(index.dtype() == DType::kI64 || index.dtype() == DType::kI32, op, ": expected an index of dtype i64 ",
           "or i32, got ", dtype_name(index.dtype()), " ", shape_str(index.shape()),
           ". HINT: convert with .to(kInt64)");
  return index.to(DType::kI64).contiguous();
}

// The kernel geometry of contiguous `shape` around `dim`.
cpu::IndexGeometry index_geometry(const Shape& shape, int64_t dim) {
  cpu::IndexGeometry g;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) g.outer *= shape[d];
    if (d > dim) g.inner *= shape[d];
  }
  g.size = shape.empty() ? 1 : shape[dim];
  return g;
}

void cpu_index_select(const Tensor& x, const Tensor& idx, const cpu::IndexGeometry& geo, const Tensor& out) {
  dispatch_with_float8(x.dtype(), "index_select", [&]<typename T>() {
    cpu::index_select_rows<T>(x.data<T>(), idx.data<int64_t>(), idx.numel(), geo, out.data<T>());
  });
}

void cpu_index_add(const Tensor& src, const Tensor& idx, const cpu::IndexGeometry& geo, const Tensor& acc) {
  dispatch_floating(src.dtype(), "index_add", [&]<typename T>() {
    using C = compute_t<T>;
    cpu::index_add_rows<T, C>(src.data<T>(), idx.data<int64_t>(), idx.numel(), geo, acc.data<C>());
  });
}

void cpu_gather(const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& out) {
  dispatch_with_float8(x.dtype(), "gather", [&]<typename T>() {
    cpu::gather_strided<T>(x.data<T>(), x.strides(), dim, idx.data<int64_t>(), idx.shape(), out.data<T>());
  });
}

void cpu_scatter_add(const Tensor& src, const Tensor& idx, int64_t dim, const Tensor& acc, std::string_view /*op*/) {
  dispatch_floating(src.dtype(), "scatter_add", [&]<typename T>() {
    using C = compute_t<T>;
    cpu::scatter_add_strided<T, C>(src.data<T>(), idx.data<int64_t>(), idx.shape(), dim, acc.shape(), acc.data<C>());
  });
}

void cpu_one_hot(const Tensor& idx, int64_t classes, const Tensor& out) {
  int64_t* o = out.data<int64_t>();
  const int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) o[i * classes + p[i]] = 1;
}

constexpr DeviceKernels<decltype(cpu_index_select)> kIndexSelect{.cpu = &cpu_index_select,
                                                                 .cuda = MT_CUDA_KERNEL(cuda_index_select)};
constexpr DeviceKernels<decltype(cpu_index_add)> kIndexAdd{.cpu = &cpu_index_add,
                                                           .cuda = MT_CUDA_KERNEL(cuda_index_add)};
constexpr DeviceKernels<decltype(cpu_gather)> kGather{.cpu = &cpu_gather, .cuda = MT_CUDA_KERNEL(cuda_gather)};
constexpr DeviceKernels<decltype(cpu_scatter_add)> kScatterAdd{.cpu = &cpu_scatter_add,
                                                               .cuda = MT_CUDA_KERNEL(cuda_scatter_add)};
constexpr DeviceKernels<decltype(cpu_one_hot)> kOneHot{.cpu = &cpu_one_hot, .cuda = MT_CUDA_KERNEL(cuda_one_hot)};

struct CatBackward final : Node {
  struct Piece {
    int64_t start, length;
    DType dtype;
  };
  std::vector<Piece> pieces;  // one per input (an input's slice of the output along dim)
  int64_t dim = 0;
  std::string_view name() const override { return "CatBackward"; }
  bool supports_create_graph() const override { return true; }  // narrow, contiguous and to record
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    std::vector<Tensor> out(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (!next_edges[i].valid()) continue;
      out[i] = grads[0].narrow(dim, pieces[i].start, pieces[i].length).contiguous().to(pieces[i].dtype);
    }
    return out;
  }
};

// Backward of index_select: zeros of the input's shape with the gradient rows added at their indices.
struct IndexSelectBackward final : Node {
  SavedTensor index{this, "index"};  // contiguous i64
  Shape input_shape;
  DType input_dtype;
  int64_t dim = 0;
  std::string_view name() const override { return "IndexSelectBackward"; }
  bool supports_create_graph() const override { return true; }  // scatter_add records
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor g = grads[0].contiguous();
    if (compute_requires_grad({&g})) return {graph_backward(g)};
    const cpu::IndexGeometry geo = index_geometry(input_shape, dim);
    // fp32 for 16-bit: round once at the end
    Tensor acc = zeros(input_shape, {.dtype = compute_dtype(input_dtype), .device = g.device()});
    dispatch(name(), kIndexAdd, g.device(), g, index.get(), geo, acc);
    return {acc.to(input_dtype)};
  }
  // The same scatter-add as a differentiable op: the index laid along dim and expanded to g's shape.
  Tensor graph_backward(const Tensor& g) const {
    if (input_shape.empty()) return g.to(input_dtype);  // a 0-d input: its one element was selected
    Shape along(input_shape.size(), 1);
    along[static_cast<size_t>(dim)] = index.get().numel();
    const Tensor idx = index.get().reshape(along).expand(g.shape()).contiguous();
    return scatter_add(zeros(input_shape, {.dtype = g.dtype(), .device = g.device()}), dim, idx, g).to(input_dtype);
  }
};

struct GatherBackward final : Node {
  SavedTensor index{this, "index"};  // contiguous i64
  Shape input_shape;
  DType input_dtype;
  int64_t dim = 0;
  std::string_view name() const override { return "GatherBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (compute_requires_grad({&grads[0]})) {  // create_graph: the same scatter-add as a differentiable op
      return {scatter_add(zeros(input_shape, {.dtype = grads[0].dtype(), .device = grads[0].device()}), dim,
                          index.get(), grads[0])
                  .to(input_dtype)};
    }
    const Tensor g = grads[0].contiguous();
    Tensor acc = zeros(input_shape, {.dtype = compute_dtype(input_dtype), .device = g.device()});
    dispatch(name(), kScatterAdd, g.device(), g, index.get(), dim, acc, name());
    return {acc.to(input_dtype)};
  }
};

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors_in, int64_t dim_in) {
  const std::vector<Tensor> tensors = amp::cast_inputs(ops::cat, tensors_in);
  MT_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  // As PyTorch, 1-D empty tensors ([0]) are skipped; the first other tensor sets the shape.
  const Tensor* ref = nullptr;
  size_t ref_i = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    MT_CHECK(tensors[i].defined(), "cat: tensor ", i, " is undefined");
    if (!ref && !(tensors[i].dim() == 1 && tensors[i].numel() == 0)) {
      ref = &tensors[i];
      ref_i = i;
    }
  }
  if (!ref) ref = &tensors[0];
  MT_CHECK(ref->dim() > 0, "cat: tensor ", ref_i, " is 0-d; zero-dimensional tensors cannot be concatenated. ",
           "HINT: use stack, or unsqueeze(0) each tensor");
  const int64_t dim = wrap_dim(dim_in, ref->dim(), "cat");
  Shape out_shape = ref->shape();
  out_shape[dim] = 0;
  DType dtype = ref->dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.dim() == 1 && t.numel() == 0 && &t != ref) continue;
    MT_CHECK(t.dim() == ref->dim(), "cat: tensor ", i, " has ", t.dim(), " dims ", shape_str(t.shape()), " but tensor ",
             ref_i, " has ", ref->dim(), " dims ", shape_str(ref->shape()));
    for (int64_t d = 0; d < t.dim(); ++d) {
      MT_CHECK(d == dim || t.size(d) == ref->size(d), "cat: sizes must match except in dim ", dim, ", but tensor ", i,
               " has shape ", shape_str(t.shape()), " and tensor ", ref_i, " has shape ", shape_str(ref->shape()),
               " (they differ in dim ", d, ": ", t.size(d), " vs ", ref->size(d), ")");
    }
    MT_CHECK(t.device() == ref->device(), "cat: tensor ", i, " is on ", t.device().str(), " but tensor ", ref_i,
             " is on ", ref->device().str());
    out_shape[dim] += t.size(dim);
    dtype = promote_types(dtype, t.dtype());
  }
  Tensor out = empty(out_shape, {.dtype = dtype, .device = ref->device()});
  auto node = compute_requires_grad(tensors) ? make_node_from<CatBackward>(tensors) : nullptr;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    const bool skipped = t.dim() == 1 && t.numel() == 0 && &t != ref;
    const int64_t len = skipped ? 0 : t.size(dim);
    if (len > 0) copy_(out.narrow(dim, offset, len), t);  // copy_ converts to the promoted dtype
    if (node) node->pieces.push_back({.start = offset, .length = len, .dtype = t.dtype()});
    offset += len;
  }
  if (node) {
    node->dim = dim;
    set_history(out, node);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors_in, int64_t dim_in) {
  const std::vector<Tensor> tensors = amp::cast_inputs(ops::stack, tensors_in);
  MT_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  const int64_t dim = wrap_dim(dim_in, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  expanded.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    MT_CHECK(tensors[i].defined(), "stack: tensor ", i, " is undefined");
    MT_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: all tensors must have the same shape, but tensor ", i,
             " has shape ", shape_str(tensors[i].shape()), " and tensor 0 has shape ", shape_str(tensors[0].shape()));
    expanded.push_back(tensors[i].unsqueeze(dim));  // a view; its backward squeezes the gradient back
  }
  return cat(expanded, dim);
}

namespace {

// One node for all of split's views: the backward writes the pieces' gradients side by side into one tensor
// (cat, as torch's SplitBackward), where a slice node per piece zero-fills an input-sized gradient for each
// and the engine then adds them up. Pieces no gradient reached arrive as zeros (the engine fills them in).
struct SplitBackward final : Node {
  int64_t dim = 0;
  DType dtype = DType::kF32;
  std::string_view name() const override { return "SplitBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    for (Tensor& g : grads) {
      if (g.dtype() != dtype) g = g.to(dtype);
    }
    return {cat(grads, dim)};
  }
};

std::vector<Tensor> split_views(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  std::vector<Tensor> out;
  {
    NoGradGuard views_only;  // the views' history is the one node below
    int64_t start = 0;
    for (int64_t s : sizes) {
      out.push_back(x.narrow(dim, start, s));
      start += s;
    }
  }
  if (compute_requires_grad({&x})) {
    auto node = make_node<SplitBackward>({&x});
    node->dim = dim;
    node->dtype = x.dtype();
    for (Tensor& t : out) set_history(t, node);
  }
  return out;
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim_in) {
  const int64_t dim = wrap_dim(dim_in, x.dim(), "split");
  MT_CHECK(x.dim() > 0, "split: cannot split a 0-d tensor");
  const int64_t n = x.size(dim);
  MT_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive, got ", split_size,
           " for ", shape_str(x.shape()), " along dim ", dim);
  if (n == 0) return {x.narrow(dim, 0, 0)};
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += split_size) sizes.push_back(std::min(split_size, n - start));
  return split_views(x, sizes, dim);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim_in) {
  const int64_t dim = wrap_dim(dim_in, x.dim(), "split");
  MT_CHECK(x.dim() > 0, "split: cannot split a 0-d tensor");
  int64_t total = 0;
  for (int64_t s : sizes) {
    MT_CHECK(s >= 0, "split: sizes must be non-negative, got ", shape_str(sizes));
    total += s;
  }
  MT_CHECK(total == x.size(dim), "split: sizes ", shape_str(sizes), " add up to ", total, " but ", shape_str(x.shape()),
           " has size ", x.size(dim), " in dim ", dim);
  return split_views(x, sizes, dim);
}

Tensor index_select(const Tensor& x, int64_t dim_in, const Tensor& index) {
  MT_CHECK(x.defined(), "index_select: the input is undefined");
  MT_CHECK(index.defined() && index.dim() <= 1, "index_select: expected a 1-D (or 0-d) index, got ",
           index.defined() ? shape_str(index.shape()) : "an undefined tensor");
  kernel_for("index_select", kIndexSelect, x.device());
  const int64_t dim = wrap_dim(dim_in, x.dim(), "index_select");
  const int64_t size = x.dim() == 0 ? 1 : x.size(dim);
  const Tensor idx = index_on(index, size, x.device(), "index_select", "a dim of size");
  Shape out_shape = x.shape();
  if (x.dim() > 0) out_shape[dim] = idx.numel();
  const Tensor xc = x.contiguous();
  Tensor out = empty(out_shape, {.dtype = x.dtype(), .device = x.device()});
  const cpu::IndexGeometry geo = index_geometry(xc.shape(), dim);
  dispatch("index_select", kIndexSelect, x.device(), xc, idx, geo, out);
  if (compute_requires_grad({&x})) {
    auto node = make_node<IndexSelectBackward>({&x});
    node->index = idx;
    node->input_shape = x.shape();
    node->input_dtype = x.dtype();
    node->dim = dim;
    set_history(out, node);
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim_in, const Tensor& index) {
  MT_CHECK(x.defined() && index.defined(), "gather: input and index must be defined tensors");
  kernel_for("gather", kGather, x.device());
  const int64_t dim = wrap_dim(dim_in, x.dim(), "gather");
  MT_CHECK(index.dim() == x.dim(), "gather: index ", shape_str(index.shape()), " must have as many dims as the input ",
           shape_str(x.shape()));
  for (int64_t d = 0; d < x.dim(); ++d) {
    MT_CHECK(d == dim || index.size(d) <= x.size(d), "gather: index ", shape_str(index.shape()),
             " is larger than the input ", shape_str(x.shape()), " in dim ", d, " (only dim ", dim, " may differ)");
  }
  const int64_t dim_size = x.dim() == 0 ? 1 : x.size(dim);
  const Tensor idx = index_on(index, dim_size, x.device(), "gather", "a dim of size");
  Tensor out = empty(index.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() > 0) dispatch("gather", kGather, x.device(), x, dim, idx, out);
  if (compute_requires_grad({&x})) {
    auto node = make_node<GatherBackward>({&x});
    node->index = idx;
    node->input_shape = x.shape();
    node->input_dtype = x.dtype();
    node->dim = dim;
    set_history(out, node);
  }
  return out;
}

namespace {
struct ScatterAddBackward final : Node {
  SavedTensor index{this, "index"};  // contiguous i64
  int64_t dim = 0;
  std::string_view name() const override { return "ScatterAddBackward"; }
  bool supports_create_graph() const override { return true; }  // gather records
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    // out = x + scatter(src): x's gradient passes through, src's is the gradient gathered at the index.
    Tensor gx, gsrc;
    if (next_edges[0].valid()) gx = grads[0];
    if (next_edges[1].valid()) gsrc = gather(grads[0], dim, index.get());
    return {gx, gsrc};
  }
};
}  // namespace

Tensor scatter_add(const Tensor& x_in, int64_t dim_in, const Tensor& index, const Tensor& src_in) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::scatter_add, {x_in, src_in});
  const Tensor &x = in[0], &src = in[1];
  MT_CHECK(x.defined() && index.defined() && src.defined(), "scatter_add: input, index and src must be defined");
  MT_CHECK(x.device() == src.device(), "scatter_add: the input is on ", x.device().str(), " but src is on ",
           src.device().str(), ". HINT: put both on one device");
  kernel_for("scatter_add", kScatterAdd, x.device());
  MT_CHECK(is_floating(x.dtype()) && x.dtype() == src.dtype(), "scatter_add: expected floating input and src of ",
           "one dtype, got ", dtype_name(x.dtype()), " and ", dtype_name(src.dtype()), ". HINT: cast src with .to(",
           dtype_name(x.dtype()), "), or run under autocast");
  const int64_t dim = wrap_dim(dim_in, x.dim(), "scatter_add");
  MT_CHECK(index.shape() == src.shape(), "scatter_add: index ", shape_str(index.shape()), " and src ",
           shape_str(src.shape()), " must have the same shape. HINT: narrow src to the index's shape");
  MT_CHECK(index.dim() == x.dim(), "scatter_add: index ", shape_str(index.shape()),
           " must have as many dims as the input ", shape_str(x.shape()));
  for (int64_t d = 0; d < x.dim(); ++d) {
    MT_CHECK(d == dim || index.size(d) <= x.size(d), "scatter_add: index ", shape_str(index.shape()),
             " is larger than the input ", shape_str(x.shape()), " in dim ", d, " (only dim ", dim, " may differ)");
  }
  const int64_t dim_size = x.dim() == 0 ? 1 : x.size(dim);
  const Tensor idx = index_on(index, dim_size, x.device(), "scatter_add", "a dim of size");
  const Tensor src_c = src.contiguous();
  // fp32 for 16-bit: round once at the end
  Tensor acc = empty(x.shape(), {.dtype = compute_dtype(x.dtype()), .device = x.device()});
  copy_(acc, x);
  if (idx.numel() > 0) dispatch("scatter_add", kScatterAdd, x.device(), src_c, idx, dim, acc, "scatter_add");
  Tensor out = acc.to(x.dtype());
  if (compute_requires_grad({&x, &src})) {
    auto node = make_node<ScatterAddBackward>({&x, &src});
    node->index = idx;
    node->dim = dim;
    set_history(out, node);
  }
  return out;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  MT_CHECK(indices.defined(), "one_hot: the indices tensor is undefined");
  MT_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 (infer) or non-negative, got ", num_classes);
  int64_t classes = num_classes;
  if (classes == -1) {
    MT_CHECK(indices.numel() > 0, "one_hot: cannot infer num_classes from an empty tensor. HINT: pass num_classes");
    const Tensor raw = indices.to(kCPU).to(DType::kI64).contiguous();  // reads a CUDA tensor once
    const int64_t* p = raw.data<int64_t>();
    classes = *std::max_element(p, p + raw.numel()) + 1;
  }
  kernel_for("one_hot", kOneHot, indices.device());
  const Tensor idx = index_on(indices, classes, indices.device(), "one_hot", "num_classes");
  Shape out_shape = indices.shape();
  out_shape.push_back(classes);
  Tensor out = zeros(out_shape, {.dtype = DType::kI64, .device = indices.device()});
  dispatch("one_hot", kOneHot, indices.device(), idx, classes, out);
  return out;
}

}  // namespace mantissa

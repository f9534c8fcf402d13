// index_put along dim 0 with one integer index tensor, in replace or accumulate mode, and its backward.
// x is seen as [rows, inner] and values as [n, inner] (n = index.numel()); accumulation sums in fp32 for
// 16-bit dtypes and rounds once. CUDA tensors use ops/shape/shape_cuda.h (row copy, atomic row adds).
#include <algorithm>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "ops/autocast.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "ops/shape/shape_cpu.h"
#include "ops/shape/shape_cuda.h"

namespace mantissa {
namespace {

// rows[idx[i], :] = values[i, :] (values contiguous [n, inner], rows contiguous).
void cpu_index_copy(const Tensor& values, const Tensor& idx, const Tensor& rows, int64_t inner) {
  dispatch_floating(rows.dtype(), "index_put", [&]<typename T>() {
    const T* src = values.data<T>();
    const int64_t* ip = idx.data<int64_t>();
    T* o = rows.data<T>();
    for (int64_t i = 0; i < idx.numel(); ++i) std::copy(src + i * inner, src + (i + 1) * inner, o + ip[i] * inner);
  });
}

// acc (f32 for 16-bit) += the rows of src at idx.
void cpu_index_add(const Tensor& src, const Tensor& idx, const cpu::IndexGeometry& geo, const Tensor& acc) {
  dispatch_floating(src.dtype(), "index_put", [&]<typename T>() {
    using C = compute_t<T>;
    cpu::index_add_rows<T, C>(src.data<T>(), idx.data<int64_t>(), idx.numel(), geo, acc.data<C>());
  });
}

constexpr DeviceKernels<decltype(cpu_index_copy)> kIndexCopy{.cpu = &cpu_index_copy,
                                                             .cuda = MT_CUDA_KERNEL(cuda_index_copy)};
constexpr DeviceKernels<decltype(cpu_index_add)> kIndexAdd{.cpu = &cpu_index_add,
                                                           .cuda = MT_CUDA_KERNEL(cuda_index_add)};

struct IndexPutBackward final : Node {
  SavedTensor index{this, "indices"};  // contiguous i64
  IndexPutMode mode = IndexPutMode::kReplace;
  Shape expanded_shape, values_shape;  // index.shape + x.shape[1:], and values' own shape
  std::string_view name() const override { return "IndexPutBackward"; }
  bool supports_create_graph() const override { return true; }  // index_put and index_select record
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor g = grads[0].contiguous();
    const Tensor& idx = index.get();
    Tensor gx, gv;
    if (next_edges[0].valid()) {
      // Accumulate: x passes through. Replace: the overwritten rows of x reach nothing.
      gx = g;
      if (mode == IndexPutMode::kReplace && idx.numel() > 0 && compute_requires_grad({&g})) {
        // create_graph: zeros put in those rows by a recorded index_put.
        gx = index_put(g, idx, zeros({}, {.dtype = g.dtype(), .device = g.device()}));
      } else if (mode == IndexPutMode::kReplace && idx.numel() > 0) {
        gx = g.clone();
        const int64_t inner = g.size(0) == 0 ? 0 : g.numel() / g.size(0);
        // The overwritten rows get zeros: a copy of zero rows, as the forward's copy.
        const Tensor zero_rows = zeros({idx.numel(), inner}, {.dtype = g.dtype(), .device = g.device()});
        dispatch(name(), kIndexCopy, gx.device(), zero_rows, idx, gx, inner);
      }
    }
    if (next_edges[1].valid()) gv = values_grad(g, idx);
    return {gx, gv};
  }
  // The values' gradient: the rows of g they went to, summed back over broadcast dims.
  Tensor values_grad(const Tensor& g, const Tensor& idx) const {
    return sum_to(index_select(g, 0, idx.reshape({-1})).reshape(expanded_shape), values_shape);
  }
};

}  // namespace

Tensor index_put(const Tensor& x_in, const Tensor& index, const Tensor& values_in, IndexPutMode mode) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::index_put, {x_in, values_in});
  const Tensor &x = in[0], &values = in[1];
  MT_CHECK(x.defined() && index.defined() && values.defined(), "index_put: input, index and values must be defined");
  MT_CHECK(x.dim() >= 1, "index_put: input must have at least one dim, got a 0-d tensor");
  MT_CHECK(x.device() == values.device(), "index_put: the input is on ", x.device().str(), " but values are on ",
           values.device().str(), ". HINT: put both on one device");
  kernel_for("index_put", kIndexCopy, x.device());
  const bool cuda = x.device().is_cuda();
  MT_CHECK(is_floating(x.dtype()) && x.dtype() == values.dtype(), "index_put: expected floating input and values of ",
           "one dtype, got ", dtype_name(x.dtype()), " and ", dtype_name(values.dtype()),
           ". HINT: cast values with .to(", dtype_name(x.dtype()), "), or run under autocast");
  if (cuda && index.device().is_cuda()) {
    MT_CHECK(index.device() == x.device() && (index.dtype() == DType::kI64 || index.dtype() == DType::kI32),
             "index_put: expected an i64 or i32 index on ", x.device().str(), ", got ", dtype_name(index.dtype()),
             " on ", index.device().str());
  }
  // A CUDA index is used as is (not range-checked: out-of-range rows are dropped); a CPU one is checked.
  const Tensor idx = cuda && index.device().is_cuda()
                         ? index.to(DType::kI64).contiguous()
                         : cpu::checked_index(index, x.size(0), "index_put", "dim 0 of size").to(x.device());
  Shape expanded = index.shape();
  expanded.insert(expanded.end(), x.shape().begin() + 1, x.shape().end());
  bool broadcasts = values.dim() <= static_cast<int64_t>(expanded.size());
  for (int64_t i = 1; broadcasts && i <= values.dim(); ++i) {
    const int64_t have = values.shape()[values.dim() - i], want = expanded[expanded.size() - i];
    broadcasts = have == want || have == 1;
  }
  MT_CHECK(broadcasts, "index_put: values ", shape_str(values.shape()), " do not broadcast to ", shape_str(expanded),
           " (the index's shape ", shape_str(index.shape()), " followed by the input's trailing dims)");
  const int64_t rows = x.size(0);
  const int64_t inner = rows == 0 ? 0 : x.numel() / rows;
  const Tensor v = values.detach().expand(expanded).contiguous();
  Tensor out;
  if (mode == IndexPutMode::kReplace) {
    out = x.detach().contiguous().clone();
    dispatch("index_put", kIndexCopy, x.device(), v, idx, out, inner);
  } else {
    // f32 for 16-bit: round once at the end
    const DType acc_dtype = is_low_precision(x.dtype()) ? DType::kF32 : x.dtype();
    Tensor acc = empty(x.shape(), {.dtype = acc_dtype, .device = x.device()});
    copy_(acc, x.detach());
    const cpu::IndexGeometry geo{.outer = 1, .size = rows, .inner = inner};
    dispatch("index_put", kIndexAdd, x.device(), v, idx, geo, acc);
    out = acc.to(x.dtype());
  }
  if (compute_requires_grad({&x, &values})) {
    auto node = make_node<IndexPutBackward>({&x, &values});
    node->index = idx;
    node->mode = mode;
    node->expanded_shape = expanded;
    node->values_shape = values.shape();
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa

// index_put along dim 0 with one integer index tensor, in replace or accumulate mode, and its backward.
// x is seen as [rows, inner] and values as [n, inner] (n = index.numel()); accumulation sums in fp32 for
// 16-bit dtypes and rounds once. CUDA tensors use ops/cuda/index.h (row copy, atomic row adds).
#include <algorithm>

#include "ops/autocast.h"
#include "framework/autograd.h"
#include "ops/cpu/shape.h"
#include "ops/reduce.h"
#include "ops/shape.h"

#ifdef MANTISSA_WITH_CUDA
#include "framework/cuda/stream.h"
#include "ops/cuda/index.h"
#endif

namespace mantissa {
namespace {

#ifdef MANTISSA_WITH_CUDA
// rows[idx[i], :] = values[i, :] on the device (values contiguous [n, inner], rows contiguous).
void device_index_copy(const Tensor& values, const Tensor& idx, const Tensor& rows, int64_t inner) {
  gpu::DeviceGuard guard(rows.device());
  dispatch_floating(rows.dtype(), "index_put", [&]<typename T>() {
    gpu::launch_index_copy<T>(values.data<T>(), idx.data<int64_t>(), idx.numel(), rows.size(0), inner,
                              rows.data<T>(), gpu::current_stream(rows.device()));
  });
}
#endif

struct IndexPutBackward final : Node {
  SavedTensor index{this, "indices"};  // contiguous i64
  IndexPutMode mode = IndexPutMode::kReplace;
  Shape expanded_shape, values_shape;  // index.shape + x.shape[1:], and values' own shape
  std::string_view name() const override { return "IndexPutBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor g = grads[0].contiguous();
    const Tensor& idx = index.get();
    Tensor gx, gv;
    if (next_edges[0].valid()) {
      // Accumulate: x passes through. Replace: the overwritten rows of x reach nothing.
      gx = g;
      if (mode == IndexPutMode::kReplace && idx.numel() > 0) {
        gx = g.clone();
        const int64_t inner = g.size(0) == 0 ? 0 : g.numel() / g.size(0);
#ifdef MANTISSA_WITH_CUDA
        if (gx.device().is_cuda()) {
          device_index_copy(zeros({idx.numel(), inner}, {.dtype = g.dtype(), .device = g.device()}), idx, gx, inner);
          return {gx, next_edges[1].valid() ? values_grad(g, idx) : Tensor()};
        }
#endif
        dispatch_floating(g.dtype(), name(), [&]<typename T>() {
          T* p = gx.data<T>();
          const int64_t* ip = idx.data<int64_t>();
          for (int64_t i = 0; i < idx.numel(); ++i) std::fill(p + ip[i] * inner, p + (ip[i] + 1) * inner, T(0));
        });
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
  const std::vector<Tensor> in = amp::cast_inputs("index_put", {x_in, values_in});
  const Tensor &x = in[0], &values = in[1];
  MT_CHECK(x.defined() && index.defined() && values.defined(), "index_put: input, index and values must be defined");
  MT_CHECK(x.dim() >= 1, "index_put: input must have at least one dim, got a 0-d tensor");
  MT_CHECK(x.device() == values.device(), "index_put: the input is on ", x.device().str(), " but values are on ",
           values.device().str(), ". HINT: put both on one device");
  bool cuda = false;
#ifdef MANTISSA_WITH_CUDA
  cuda = x.device().is_cuda();
#endif
  MT_CHECK(x.device().is_cpu() || cuda, "index_put: no kernel for ", x.device().str(), " in this build");
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
  const int64_t n = idx.numel(), rows = x.size(0);
  const int64_t inner = rows == 0 ? 0 : x.numel() / rows;
  const Tensor v = values.detach().expand(expanded).contiguous();
  Tensor out = dispatch_floating(x.dtype(), "index_put", [&]<typename T>() {
#ifdef MANTISSA_WITH_CUDA
    if (cuda) {
      if (mode == IndexPutMode::kReplace) {
        Tensor o = x.detach().contiguous().clone();
        device_index_copy(v, idx, o, inner);
        return o;
      }
      using C = compute_t<T>;
      Tensor acc = empty(x.shape(), {.dtype = dtype_v<C>, .device = x.device()});
      copy_(acc, x.detach());
      gpu::DeviceGuard guard(x.device());
      gpu::launch_index_add<T, C>(v.data<T>(), idx.data<int64_t>(), n, 1, rows, inner, acc.data<C>(),
                                  gpu::current_stream(x.device()));
      return acc.to(x.dtype());
    }
#endif
    const int64_t* ip = idx.data<int64_t>();
    if (mode == IndexPutMode::kReplace) {
      Tensor o = x.detach().contiguous().clone();
      const T* src = v.data<T>();
      for (int64_t i = 0; i < n; ++i) std::copy(src + i * inner, src + (i + 1) * inner, o.data<T>() + ip[i] * inner);
      return o;
    }
    using C = compute_t<T>;
    Tensor acc = empty(x.shape(), {.dtype = dtype_v<C>});  // fp32 for 16-bit: round once at the end
    copy_(acc, x.detach());
    cpu::index_add_rows<T, C>(v.data<T>(), ip, n, {.outer = 1, .size = rows, .inner = inner}, acc.data<C>());
    return acc.to(x.dtype());
  });
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

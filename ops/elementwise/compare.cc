// Comparisons (bool results, no gradient), where, masked_fill and clamp with their backward.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/typed_entries.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

Tensor scalar_like(const Tensor& t, double v) { return full({}, v, {.dtype = t.dtype(), .device = t.device()}); }

void check_bool(const Tensor& t, std::string_view op, std::string_view arg) {
  MT_CHECK(t.dtype() == DType::kBool, op, ": ", arg, " must be a bool tensor, got ", dtype_name(t.dtype()),
           " of shape ", shape_str(t.shape()), ". HINT: build it with a comparison such as gt(x, 0)");
}

// The unsigned integer of a size, read through may_alias so that any element type's bits can be moved.
template <size_t kBytes>
struct SameSizeBits;
template <>
struct SameSizeBits<1> {
  using type __attribute__((may_alias)) = uint8_t;
};
template <>
struct SameSizeBits<2> {
  using type __attribute__((may_alias)) = uint16_t;
};
template <>
struct SameSizeBits<4> {
  using type __attribute__((may_alias)) = uint32_t;
};
template <>
struct SameSizeBits<8> {
  using type __attribute__((may_alias)) = uint64_t;
};

// out[i] = cond[i] ? a[i * SA] : b[i * SB] over n elements (SA, SB in {0, 1}), as a bit-mask select on
// the elements' bits with the condition's bytes (0 or 1) read as integers: a ?: on a bool or between
// two loads keeps GCC from vectorizing, this loop vectorizes for every element size.
template <int64_t SA, int64_t SB, typename U>
void select_rows(void* out, const void* cond, const void* a, const void* b, int64_t n) {
  U* __restrict op = static_cast<U*>(out);
  const uint8_t* __restrict cp = static_cast<const uint8_t*>(cond);
  const U* ap = static_cast<const U*>(a);
  const U* bp = static_cast<const U*>(b);
  const U a0 = ap[0], b0 = bp[0];
  for (int64_t i = 0; i < n; ++i) {
    const U x = SA ? ap[i] : a0, y = SB ? bp[i] : b0;
    const U m = static_cast<U>(-static_cast<U>(cp[i]));
    op[i] = static_cast<U>((x & m) | (y & static_cast<U>(~m)));
  }
}

// cond ? x : y over any dtype on the CPU (the CUDA one is cuda_select).
Tensor cpu_select(const Tensor& cond, const Tensor& x, const Tensor& y, std::string_view op) {
  const DType dt = promote_types(x.dtype(), y.dtype());
  const Tensor x2 = x.to(dt), y2 = y.to(dt);
  const Shape shape = cpu::broadcast_shapes(cpu::broadcast_shapes(cond.shape(), x.shape(), op), y.shape(), op);
  Tensor out = empty(shape, {.dtype = dt, .device = x.device()});
  dispatch_all(dt, op, [&]<typename T>() {
    T* o = out.data<T>();
    const bool* c = cond.data<bool>();
    const T* a = x2.data<T>();
    const T* b = y2.data<T>();
    const Shape sc = cpu::broadcast_strides(cond, shape), sa = cpu::broadcast_strides(x2, shape),
                sb = cpu::broadcast_strides(y2, shape);
    std::array<const Shape*, 4> st{&out.strides(), &sc, &sa, &sb};
    strided_for_each<4>(shape, st, [&](int64_t n, const auto& off, const auto& s) {
      if (s[0] == 1 && s[1] == 1 && (s[2] == 0 || s[2] == 1) && (s[3] == 0 || s[3] == 1)) {
        // Contiguous out and cond, each value contiguous or one broadcast scalar (masked_fill).
        using U = typename SameSizeBits<sizeof(T)>::type;
        void* dst = o + off[0];
        const void* cp = c + off[1];
        const void* ap = a + off[2];
        const void* bp = b + off[3];
        if (s[2] == 1 && s[3] == 1) return select_rows<1, 1, U>(dst, cp, ap, bp, n);
        if (s[2] == 1) return select_rows<1, 0, U>(dst, cp, ap, bp, n);
        if (s[3] == 1) return select_rows<0, 1, U>(dst, cp, ap, bp, n);
        return select_rows<0, 0, U>(dst, cp, ap, bp, n);
      }
      for (int64_t i = 0; i < n; ++i) {
        o[off[0] + i * s[0]] = c[off[1] + i * s[1]] ? a[off[2] + i * s[2]] : b[off[3] + i * s[3]];
      }
    });
  });
  return out;
}

constexpr DeviceKernels<decltype(cpu_select)> kSelect{.cpu = &cpu_select, .cuda = MT_CUDA_KERNEL(cuda_select)};

// The autograd-free select shared by where, masked_fill and the backward passes.
Tensor select_kernel(const Tensor& cond, const Tensor& x, const Tensor& y, std::string_view op) {
  const Tensor* cuda = detail::first_cuda({&x, &y, &cond});
  return dispatch(op, kSelect, cuda ? cuda->device() : kCPU, cond, x, y, op);
}

struct WhereBackward final : Node {
  SavedTensor cond{this, "condition"};
  Shape a_shape, b_shape;
  DType a_dtype, b_dtype;
  std::string_view name() const override { return "WhereBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    const Tensor zero = scalar_like(g[0], 0.0);
    const Tensor& c = cond.get();
    // create_graph: where() itself, which records this node again.
    const bool graph = compute_requires_grad({&g[0]});
    auto select = [&](const Tensor& x, const Tensor& y) {
      return graph ? where(c, x, y) : select_kernel(c, x, y, "where_backward");
    };
    Tensor ga, gb;
    if (next_edges[0].valid()) ga = sum_to(select(g[0], zero), a_shape).to(a_dtype);
    if (next_edges[1].valid()) gb = sum_to(select(zero, g[0]), b_shape).to(b_dtype);
    return {ga, gb};
  }
};

struct MaskedFillBackward final : Node {
  SavedTensor mask{this, "mask"};
  std::string_view name() const override { return "MaskedFillBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    if (compute_requires_grad({&g[0]})) return {masked_fill(g[0], mask.get(), 0.0)};  // create_graph
    return {select_kernel(mask.get(), scalar_like(g[0], 0.0), g[0], "masked_fill_backward")};
  }
};

struct ClampBackward final : Node {
  SavedTensor self{this, "self"};
  std::optional<double> lo, hi;
  std::string_view name() const override { return "ClampBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    const double l = lo.value_or(-INFINITY), h = hi.value_or(INFINITY);
    if (compute_requires_grad({&g[0]})) {
      // create_graph: the gradient passes where lo <= x <= hi (not at a NaN), through where().
      const Tensor x = self.get(), zero = scalar_like(g[0], 0.0);
      return {where(ge(x, l), where(le(x, h), g[0], zero), zero)};
    }
    return {map_binary(g[0], self.get(), "clamp_backward",
                       [l, h](auto gv, auto x) {
                         using C = decltype(gv);
                         return pointwise::clamp_backward(gv, x, C(l), C(h));
                       },
                       {gpu::BinaryOp::kClampBackward, l, h})};
  }
};

}  // namespace

#define MT_COMPARE_OP(NAME, EXPR, CODE)                          \
  Tensor NAME(const Tensor& a, const Tensor& b) {                \
    return map_compare(                                          \
        a, b, #NAME, [](auto x, auto y) { return EXPR; }, CODE); \
  }                                                              \
  Tensor NAME(const Tensor& a, double b) { return NAME(a, scalar_like(a, b)); }

MT_COMPARE_OP(eq, x == y, gpu::CompareOp::kEq)
MT_COMPARE_OP(ne, x != y, gpu::CompareOp::kNe)
MT_COMPARE_OP(lt, x < y, gpu::CompareOp::kLt)
MT_COMPARE_OP(le, x <= y, gpu::CompareOp::kLe)
MT_COMPARE_OP(gt, x > y, gpu::CompareOp::kGt)
MT_COMPARE_OP(ge, x >= y, gpu::CompareOp::kGe)
#undef MT_COMPARE_OP

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_bool(cond, "where", "condition");
  // CUDA operands are checked (devices, dtypes) by cuda_select; CPU ones here.
  if (!a.device().is_cuda()) detail::check_same_device("where", a, b);
  Tensor out = select_kernel(cond, a, b, "where");
  if (is_floating(out.dtype()) && compute_requires_grad({&a, &b})) {
    auto node = make_node<WhereBackward>({&a, &b});
    node->cond = cond;
    node->a_shape = a.shape();
    node->b_shape = b.shape();
    node->a_dtype = a.dtype();
    node->b_dtype = b.dtype();
    set_history(out, node);
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_bool(mask, "masked_fill", "mask");
  const Shape shape = cpu::broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  MT_CHECK(shape == x.shape(), "masked_fill: mask of shape ", shape_str(mask.shape()),
           " does not broadcast to the input's shape ", shape_str(x.shape()));
  Tensor out = select_kernel(mask, scalar_like(x, value), x, "masked_fill");
  if (compute_requires_grad({&x})) {
    auto node = make_node<MaskedFillBackward>({&x});
    node->mask = mask;
    set_history(out, node);
  }
  return out;
}

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  MT_CHECK(lo.has_value() || hi.has_value(), "clamp: at least one of min and max must be given");
  MT_CHECK(!lo || !hi || *lo <= *hi, "clamp: min ", *lo, " is greater than max ", *hi);
  const double l = lo.value_or(-INFINITY), h = hi.value_or(INFINITY);
  Tensor out = map_unary(x, "clamp",
                         [l, h](auto v) {
                           using C = decltype(v);
                           return pointwise::clamp(v, C(l), C(h));
                         },
                         {gpu::UnaryOp::kClamp, l, h});
  if (compute_requires_grad({&x})) {
    auto node = make_node<ClampBackward>({&x});
    node->self = x;
    node->lo = lo;
    node->hi = hi;
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa

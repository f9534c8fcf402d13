// conv2d forward and backward. f32 and bf16 go to oneDNN's convolution primitives (ops/conv/conv_onednn_cpu),
// except one-input-channel unpadded stride-1 layers, which the direct kernels of ops/conv/conv_direct_cpu do;
// f16 is widened to f32 exactly and rounded once (oneDNN 2.6 does not convolve f16 on this CPU); f64 and
// any case oneDNN declines go to
// im2col + GEMM (ops/matmul/gemm_cpu.h), per sample and per group, described next.
// Letters: N batch, C input channels, O output channels, G groups, K = C/G*KH*KW (GEMM depth),
// P = OH*OW (output pixels). Forward: y[n, o-group] = W_g [O/G, K] @ col_g [K, P], bias pre-filled
// into y with beta = 1 so a 16-bit output is rounded once. Backward runs in the compute type (fp32 for
// 16-bit, operands widened exactly): dcol = W_g^T @ dy_g then col2im; dW_g += dy_g @ col_g^T per
// sample; db = sum of dy. The 16-bit results are rounded once at the end.
//
// Why oneDNN for f32/bf16: bench/conv_bench.cc, N=64, 32->64 channels, 28x28, 3x3, pad 1, 2 threads on
// this (shared, loaded) 2-core machine: forward im2col + GEMM took 800-930 ms in f32 and 1.1-1.4 s in bf16;
// oneDNN, reorders from/to NCHW included, 80-104 ms (jit:avx512_core) and 60 ms (brgconv AMX bf16): 8x and
// 18x faster. oneDNN accumulates in f32 and converts once, so the 16-bit contract holds; its bf16 weight
// gradient is requested in f32 and rounded once here.
// CUDA tensors go to cuDNN (ops/conv/conv_cuda.h) on the device's current stream, forward and backward.
#include "ops/conv/conv.h"

#include <type_traits>
#include <utility>
#include <vector>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "framework/profiler/profiler.h"
#include "ops/autocast.h"
#include "ops/conv/conv_cpu.h"
#include "ops/conv/conv_cuda.h"
#include "ops/conv/conv_direct_cpu.h"
#include "ops/conv/conv_onednn_cpu.h"
#include "ops/cpu/compute_buffer.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/gemm_cpu.h"

namespace mantissa {
namespace {

// A forward convolution's FLOPs: 2 per multiply-add, n * o * oh * ow outputs of c/groups * kh * kw each.
double conv2d_flops(const cpu::Conv2dGeometry& g) {
  return 2.0 * static_cast<double>(g.n) * static_cast<double>(g.o) * static_cast<double>(g.out_plane()) *
         static_cast<double>(g.col_rows());
}

using cpu::Conv2dGeometry;
using cpu::GemmArgs;
using cpu::Trans;

// A 1x1 kernel with stride 1 and no padding reads the input as its own column matrix.
bool is_pointwise(const Conv2dGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}

// The dtypes oneDNN convolves for us.
template <typename T>
constexpr bool kUseOneDnn = std::is_same_v<T, float> || std::is_same_v<T, BFloat16>;

// f16 (which oneDNN 2.6 does not convolve here) runs as the f32 convolution of the exactly widened
// operands, rounded once at the output: the 16-bit contract, at oneDNN's f32 speed instead of im2col's.
// So does bf16 on a CPU without bf16 dot products, where oneDNN's bf16 convolution emulates them (the
// choice bf16 GEMMs make: cpu::bf16_gemm_path()).
template <typename T>
void narrow(const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<compute_t<T>, float> && !std::is_same_v<T, float>) cpu::from_compute(src, dst, n);
}

template <typename T>
bool convolve_widened() {
  if constexpr (std::is_same_v<T, Half>) return true;
  if constexpr (std::is_same_v<T, BFloat16>) return cpu::bf16_gemm_path() == cpu::Bf16GemmPath::kWidened;
  return false;
}

template <typename T>
std::vector<float> widened(const T* p, int64_t n) {
  std::vector<float> out(p ? static_cast<size_t>(n) : 0);
  if constexpr (std::is_same_v<compute_t<T>, float>) {
    if (p) cpu::to_compute(p, out.data(), n);
  }
  return out;
}
float* data_or_null(std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

template <typename T>
void conv_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* b, T* y) {
  if (convolve_widened<T>()) {
    std::vector<float> x32 = widened(x, g.n * g.c * g.h * g.w), w32 = widened(w, g.o * g.col_rows()),
                       b32 = widened(b, g.o), y32(static_cast<size_t>(g.n * g.o * g.out_plane()));
    conv_forward<float>(g, x32.data(), w32.data(), data_or_null(b32), y32.data());
    narrow(y32.data(), y, static_cast<int64_t>(y32.size()));
    return;
  }
  if constexpr (kUseOneDnn<T>) {
    std::vector<float> bias32(b ? static_cast<size_t>(g.o) : 0);
    if (b) cpu::to_compute(b, bias32.data(), g.o);
    if (cpu::conv2d_direct_supported(g)) {  // one input channel: no layout reorders
      cpu::conv2d_direct_forward(g, x, w, b ? bias32.data() : nullptr, y);
      return;
    }
    if (g.n > 0 && cpu::onednn_conv2d_forward(g, x, w, b ? bias32.data() : nullptr, y)) return;
  }
  const int64_t K = g.col_rows(), P = g.out_plane(), cpg = g.c_per_group(), opg = g.o_per_group();
  std::vector<T> col(is_pointwise(g) ? 0 : static_cast<size_t>(K * P));
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* xg = x + (n * g.c + grp * cpg) * g.h * g.w;
      const T* colp = xg;
      if (!is_pointwise(g)) {
        cpu::im2col(xg, g, cpg, col.data(), P);
        colp = col.data();
      }
      T* yg = y + (n * g.o + grp * opg) * P;
      if (b) {
        for (int64_t o = 0; o < opg; ++o) std::fill(yg + o * P, yg + (o + 1) * P, b[grp * opg + o]);
      }
      cpu::gemm(GemmArgs<T>{.m = opg,
                            .n = P,
                            .k = K,
                            .a = w + grp * opg * K,
                            .lda = K,
                            .b = colp,
                            .ldb = P,
                            .c = yg,
                            .ldc = P,
                            .beta = b ? 1.0f : 0.0f});
    }
  }
}

// Gradients in the compute type A; each output pointer may be null when that grad is not needed.
template <typename T>
void conv_backward_im2col(const Conv2dGeometry& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db) {
  if (!dx && !dw && !db) return;
  using A = compute_t<T>;
  const int64_t K = g.col_rows(), P = g.out_plane(), cpg = g.c_per_group(), opg = g.o_per_group();
  const int64_t plane = g.h * g.w;
  std::vector<A> dy_store, w_store, col(static_cast<size_t>(K * P));
  const A* dyA = cpu::compute_view(dy, g.n * g.o * P, dy_store);

  if (dx) {
    const A* wA = cpu::compute_view(w, g.o * K, w_store);
    std::vector<A> dx_acc(static_cast<size_t>(g.c * plane));
    for (int64_t n = 0; n < g.n; ++n) {
      std::fill(dx_acc.begin(), dx_acc.end(), A(0));
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const A* dyg = dyA + (n * g.o + grp * opg) * P;
        A* dxg = dx_acc.data() + grp * cpg * plane;
        // dcol [K, P] = W_g^T [K, O/G] @ dy_g [O/G, P]; a pointwise conv writes dx directly.
        A* dcol = is_pointwise(g) ? dxg : col.data();
        cpu::gemm(GemmArgs<A>{.trans_a = Trans::kYes,
                              .m = K,
                              .n = P,
                              .k = opg,
                              .a = wA + grp * opg * K,
                              .lda = K,
                              .b = dyg,
                              .ldb = P,
                              .c = dcol,
                              .ldc = P});
        if (!is_pointwise(g)) cpu::col2im(col.data(), g, cpg, dxg);
      }
      cpu::from_compute(dx_acc.data(), dx + n * g.c * plane, g.c * plane);
    }
  }
  if (dw) {
    std::vector<A> dw_acc(static_cast<size_t>(g.o * K), A(0)), x_store;
    for (int64_t n = 0; n < g.n; ++n) {
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const T* xg = x + (n * g.c + grp * cpg) * plane;
        const A* colp;
        if (is_pointwise(g)) {
          colp = cpu::compute_view(xg, cpg * plane, x_store);
        } else {
          cpu::im2col(xg, g, cpg, col.data(), P);
          colp = col.data();
        }
        // dW_g [O/G, K] += dy_g [O/G, P] @ col_g^T [P, K]
        cpu::gemm(GemmArgs<A>{.trans_b = Trans::kYes,
                              .m = opg,
                              .n = K,
                              .k = P,
                              .a = dyA + (n * g.o + grp * opg) * P,
                              .lda = P,
                              .b = colp,
                              .ldb = P,
                              .c = dw_acc.data() + grp * opg * K,
                              .ldc = K,
                              .beta = 1.0f});
      }
    }
    cpu::from_compute(dw_acc.data(), dw, g.o * K);
  }
  if (db) {
    std::vector<A> db_acc(static_cast<size_t>(g.o), A(0));
    for (int64_t n = 0; n < g.n; ++n) {
      for (int64_t o = 0; o < g.o; ++o) {
        const A* row = dyA + (n * g.o + o) * P;
        A s = 0;
        for (int64_t p = 0; p < P; ++p) s += row[p];
        db_acc[o] += s;
      }
    }
    cpu::from_compute(db_acc.data(), db, g.o);
  }
}

template <typename T>
void conv_backward(const Conv2dGeometry& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db) {
  if (convolve_widened<T>()) {  // as the forward: f32 on widened operands, each grad rounded once
    const int64_t nx = g.n * g.c * g.h * g.w, nw = g.o * g.col_rows();
    std::vector<float> x32 = widened(x, nx), w32 = widened(w, nw), dy32 = widened(dy, g.n * g.o * g.out_plane());
    std::vector<float> dx32(dx ? static_cast<size_t>(nx) : 0), dw32(dw ? static_cast<size_t>(nw) : 0),
        db32(db ? static_cast<size_t>(g.o) : 0);
    conv_backward<float>(g, data_or_null(x32), data_or_null(w32), dy32.data(), data_or_null(dx32), data_or_null(dw32),
                         data_or_null(db32));
    if (dx) narrow(dx32.data(), dx, nx);
    if (dw) narrow(dw32.data(), dw, nw);
    if (db) narrow(db32.data(), db, g.o);
    return;
  }
  if constexpr (kUseOneDnn<T>) {
    if (g.n > 0 && dx && cpu::onednn_conv2d_backward_data(g, dy, w, dx)) dx = nullptr;
    if (g.n > 0 && dw) {
      std::vector<float> dw32(static_cast<size_t>(g.o * g.col_rows())), db32(db ? static_cast<size_t>(g.o) : 0);
      bool done = true;
      if (cpu::conv2d_direct_supported(g)) {  // one input channel: no layout reorders
        cpu::conv2d_direct_backward_weights(g, x, dy, dw32.data(), db ? db32.data() : nullptr);
      } else {
        done = cpu::onednn_conv2d_backward_weights(g, x, dy, dw32.data(), db ? db32.data() : nullptr);
      }
      if (done) {
        cpu::from_compute(dw32.data(), dw, g.o * g.col_rows());
        if (db) cpu::from_compute(db32.data(), db, g.o);
        dw = db = nullptr;
      }
    }
  }
  conv_backward_im2col(g, x, w, dy, dx, dw, db);  // whatever oneDNN did not do
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

void cpu_conv2d(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& out) {
  dispatch_floating(x.dtype(), "conv2d", [&]<typename T>() {
    conv_forward<T>(g, x.data<T>(), w.data<T>(), ptr_or_null<T>(b), out.data<T>());
  });
}

void cpu_conv2d_backward(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                         const Tensor& dw, const Tensor& db) {
  dispatch_floating(dy.dtype(), "conv2d_backward", [&]<typename T>() {
    conv_backward<T>(g, ptr_or_null<T>(x), ptr_or_null<T>(w), dy.data<T>(), ptr_or_null<T>(dx), ptr_or_null<T>(dw),
                     ptr_or_null<T>(db));
  });
}

constexpr DeviceKernels<decltype(cpu_conv2d)> kConv2d{.cpu = &cpu_conv2d, .cuda = MT_CUDA_KERNEL(cuda_conv2d)};
constexpr DeviceKernels<decltype(cpu_conv2d_backward)> kConv2dBackward{.cpu = &cpu_conv2d_backward,
                                                                       .cuda = MT_CUDA_KERNEL(cuda_conv2d_backward)};

Conv2dOptions options_of(const Conv2dGeometry& g) {
  return {.stride = {g.stride_h, g.stride_w},
          .padding = {g.pad_h, g.pad_w},
          .dilation = {g.dil_h, g.dil_w},
          .groups = g.groups};
}

// conv2d's gradients as a differentiable op: dx from (dy, w), dw from (x, dy), db from dy, each computed
// when asked for (x is read only for dw, w only for dx). Under create_graph they record
// Conv2dBackwardBackward, whose own gradients are conv2d and this op again.
struct Conv2dGrads {
  Tensor dx, dw, db;
};
Conv2dGrads conv2d_grads(const Conv2dGeometry& g, const Tensor& dy, const Tensor& x, const Tensor& w,
                         const Shape& weight_shape, bool need_dx, bool need_dw, bool need_db);

// Each gradient is linear in dy and in the one saved tensor it reads, so with ggx, ggw, ggb the gradients
// arriving for dx, dw, db: d/d(dy) = conv2d(ggx, w) + conv2d(x, ggw) + ggb (the forward is their adjoint),
// d/dx = dx-of(dy; ggw) and d/dw = dw-of(ggx; dy).
struct Conv2dBackwardBackward final : Node {
  SavedTensor grad{this, "grad"};      // dy
  SavedTensor input{this, "input"};    // x, when dw was computed
  SavedTensor weight{this, "weight"};  // w, when dx was computed
  Conv2dGeometry geometry;
  Shape weight_shape;
  int out_dx = -1, out_dw = -1, out_db = -1;  // the output number of each computed gradient
  std::string_view name() const override { return "Conv2dBackwardBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& gg) override {
    const Tensor ggx = out_dx >= 0 ? gg[out_dx] : Tensor(), ggw = out_dw >= 0 ? gg[out_dw] : Tensor(),
                 ggb = out_db >= 0 ? gg[out_db] : Tensor();
    const Tensor& dy = grad.get();
    const Conv2dOptions options = options_of(geometry);
    Tensor d_dy, d_x, d_w;
    if (next_edges[0].valid()) {
      auto add_term = [&](const Tensor& t) { d_dy = d_dy.defined() ? add(d_dy, t) : t; };
      if (ggx.defined()) add_term(conv2d(ggx, weight.get(), Tensor(), options));
      if (ggw.defined()) add_term(conv2d(input.get(), ggw, Tensor(), options));
      if (ggb.defined()) add_term(ggb.view({1, geometry.o, 1, 1}).expand(dy.shape()));
    }
    if (next_edges[1].valid() && ggw.defined()) {
      d_x = conv2d_grads(geometry, dy, Tensor(), ggw, weight_shape, true, false, false).dx;
    }
    if (next_edges[2].valid() && ggx.defined()) {
      d_w = conv2d_grads(geometry, dy, ggx, Tensor(), weight_shape, false, true, false).dw;
    }
    return {d_dy, d_x, d_w};
  }
};

Conv2dGrads conv2d_grads(const Conv2dGeometry& g, const Tensor& dy_in, const Tensor& x_in, const Tensor& w_in,
                         const Shape& weight_shape, bool need_dx, bool need_dw, bool need_db) {
  const Tensor dy = dy_in.contiguous();
  const Tensor x = need_dw ? x_in.contiguous() : Tensor(), w = need_dx ? w_in.contiguous() : Tensor();
  const TensorOptions options{.dtype = dy.dtype(), .device = dy.device()};
  Conv2dGrads r;
  if (need_dx) r.dx = empty({g.n, g.c, g.h, g.w}, options);
  if (need_dw) r.dw = empty(weight_shape, options);
  if (need_db) r.db = empty({g.o}, options);
  {
    // One profiler event for the gradients, with their FLOPs: one forward's worth for each of dx and dw.
    profiler::RecordScope scope("conv2d_backward", profiler::Category::kOp, dy.device());
    if (scope.active()) {
      for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &w, &dy, &r.dx, &r.dw, &r.db})
        scope.add_input(*t);
      scope.add_flops(conv2d_flops(g) * ((need_dx ? 1 : 0) + (need_dw ? 1 : 0)));
    }
    dispatch("conv2d_backward", kConv2dBackward, dy.device(), g, x, w, dy, r.dx, r.dw, r.db);
  }
  if (compute_requires_grad({&dy, &x, &w})) {
    auto node = make_node<Conv2dBackwardBackward>({&dy, &x, &w});
    node->grad = dy;
    if (x.defined()) node->input = x;
    if (w.defined()) node->weight = w;
    node->geometry = g;
    node->weight_shape = weight_shape;
    int next = 0;
    for (auto [t, nr] :
         {std::pair{&r.dx, &node->out_dx}, std::pair{&r.dw, &node->out_dw}, std::pair{&r.db, &node->out_db}}) {
      if (!t->defined()) continue;
      *nr = next++;
      set_history(*t, node);
    }
  }
  return r;
}

struct Conv2dBackward final : Node {
  SavedTensor input{this, "input"};    // contiguous x, saved when the weight needs a grad
  SavedTensor weight{this, "weight"};  // contiguous weight, saved when the input needs a grad
  Conv2dGeometry geometry;
  Shape weight_shape;
  std::string_view name() const override { return "Conv2dBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const bool need_dx = next_edges[0].valid(), need_dw = next_edges[1].valid();
    Conv2dGrads r =
        conv2d_grads(geometry, grads[0], need_dw ? input.get() : Tensor(), need_dx ? weight.get() : Tensor(),
                     weight_shape, need_dx, need_dw, next_edges[2].valid());
    return {r.dx, r.dw, r.db};
  }
};

int64_t out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

Conv2dGeometry check_and_plan(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& opt) {
  MT_CHECK(x.dim() == 4, "conv2d: input must be [N, C, H, W], got ", shape_str(x.shape()));
  MT_CHECK(w.dim() == 4, "conv2d: weight must be [O, C/groups, KH, KW], got ", shape_str(w.shape()));
  MT_CHECK(is_floating(x.dtype()), "conv2d: expected a floating input, got ", dtype_name(x.dtype()));
  MT_CHECK(x.dtype() == w.dtype(), "conv2d: input is ", dtype_name(x.dtype()), " but weight is ", dtype_name(w.dtype()),
           ". HINT: cast both to one dtype (or run under autocast)");
  MT_CHECK(w.device() == x.device() && (!b.defined() || b.device() == x.device()), "conv2d: input is on ",
           x.device().str(), " but weight is on ", w.device().str(),
           b.defined() ? " and bias on " + b.device().str() : "", ". HINT: move them to one device with .to(device)");
  kernel_for("conv2d", kConv2d, x.device());
  for (int i = 0; i < 2; ++i) {
    MT_CHECK(opt.stride[i] > 0 && opt.dilation[i] > 0 && opt.padding[i] >= 0,
             "conv2d: stride and dilation must be positive and padding non-negative, got stride [", opt.stride[0], ", ",
             opt.stride[1], "], padding [", opt.padding[0], ", ", opt.padding[1], "], dilation [", opt.dilation[0],
             ", ", opt.dilation[1], "]");
  }
  Conv2dGeometry g{.n = x.size(0),
                   .c = x.size(1),
                   .h = x.size(2),
                   .w = x.size(3),
                   .o = w.size(0),
                   .kh = w.size(2),
                   .kw = w.size(3),
                   .stride_h = opt.stride[0],
                   .stride_w = opt.stride[1],
                   .pad_h = opt.padding[0],
                   .pad_w = opt.padding[1],
                   .dil_h = opt.dilation[0],
                   .dil_w = opt.dilation[1],
                   .groups = opt.groups};
  MT_CHECK(g.groups > 0, "conv2d: groups must be positive, got ", g.groups);
  MT_CHECK(g.c % g.groups == 0 && g.o % g.groups == 0, "conv2d: groups=", g.groups,
           " must divide both input channels (", g.c, ") and output channels (", g.o, ")");
  MT_CHECK(w.size(1) * g.groups == g.c, "conv2d: input ", shape_str(x.shape()), " has ", g.c, " channels but weight ",
           shape_str(w.shape()), " expects ", w.size(1) * g.groups, " (", w.size(1), " per group x ", g.groups,
           " groups). HINT: weight is [out_channels, in_channels/groups, KH, KW]");
  if (b.defined()) {
    MT_CHECK(b.dim() == 1 && b.size(0) == g.o, "conv2d: bias must be [", g.o, "] for weight ", shape_str(w.shape()),
             ", got ", shape_str(b.shape()));
    MT_CHECK(b.dtype() == x.dtype(), "conv2d: bias is ", dtype_name(b.dtype()), " but input is ", dtype_name(x.dtype()),
             ". HINT: cast the bias to the input's dtype");
  }
  g.oh = out_size(g.h, g.kh, g.stride_h, g.pad_h, g.dil_h);
  g.ow = out_size(g.w, g.kw, g.stride_w, g.pad_w, g.dil_w);
  MT_CHECK(g.oh > 0 && g.ow > 0, "conv2d: input ", shape_str(x.shape()), " with padding [", g.pad_h, ", ", g.pad_w,
           "] is smaller than the dilated kernel ", shape_str(w.shape()), ": output would be ", g.oh, "x", g.ow,
           ". HINT: add padding or use a smaller kernel");
  return g;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Conv2dOptions options) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::conv2d, {x_in, weight_in, bias_in});
  const Tensor &x = in[0], &weight = in[1], &bias = in[2];
  MT_CHECK(x.defined() && weight.defined(), "conv2d: input and weight must be defined");
  if (x.dim() == 3) return conv2d(x.unsqueeze(0), weight, bias, options).squeeze(0);  // unbatched [C, H, W]
  const Conv2dGeometry g = check_and_plan(x, weight, bias, options);
  const Tensor xc = x.contiguous(), wc = weight.contiguous();
  const Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  Tensor out = empty({g.n, g.o, g.oh, g.ow}, {.dtype = x.dtype(), .device = x.device()});
  {
    profiler::RecordScope scope("conv2d", profiler::Category::kOp, x.device());  // the dispatch folds into it
    if (scope.active()) {
      for (const Tensor* t : std::initializer_list<const Tensor*>{&xc, &wc, &bc, &out}) scope.add_input(*t);
      scope.add_flops(conv2d_flops(g));
    }
    dispatch("conv2d", kConv2d, x.device(), g, xc, wc, bc, out);
  }
  if (compute_requires_grad({&x, &weight, &bias})) {
    auto node = make_node<Conv2dBackward>({&x, &weight, &bias});
    node->geometry = g;
    node->weight_shape = weight.shape();
    if (weight.requires_grad()) node->input = xc;
    if (x.requires_grad()) node->weight = wc;
    set_history(out, node);
  }
  return out;
}

Tensor conv1d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Conv1dOptions options) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::conv1d, {x_in, weight_in, bias_in});
  const Tensor &x = in[0], &weight = in[1], &bias = in[2];
  MT_CHECK(x.defined() && weight.defined(), "conv1d: input and weight must be defined");
  MT_CHECK(x.dim() == 2 || x.dim() == 3, "conv1d: expected input [N, C, L] or [C, L], got ", shape_str(x.shape()));
  MT_CHECK(weight.dim() == 3, "conv1d: expected weight [O, C/groups, K], got ", shape_str(weight.shape()));
  if (x.dim() == 2) return conv1d(x.unsqueeze(0), weight, bias, options).squeeze(0);  // unbatched [C, L]
  // [N, C, L] -> [N, C, 1, L]; the height dim has kernel 1, stride 1, no padding.
  const Conv2dOptions o2{.stride = {1, options.stride},
                         .padding = {0, options.padding},
                         .dilation = {1, options.dilation},
                         .groups = options.groups};
  return conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, o2).squeeze(2);
}

}  // namespace mantissa

// oneDNN convolution calls: build the descriptors from a Conv2dGeometry (grouped weights as GOIHW,
// oneDNN's dilation is ours minus one, right padding follows from the output size), let oneDNN choose
// layouts (format_tag::any), and reorder plain user buffers into and out of them.
#include "ops/cpu/conv_onednn.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <type_traits>

namespace mantissa::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};
Context& context() {
  thread_local Context ctx;
  return ctx;
}

template <typename T>
constexpr memory::data_type dnnl_type() {
  return std::is_same_v<T, float> ? memory::data_type::f32 : memory::data_type::bf16;
}

// Dims and descriptors of one conv2d; `any` lets the primitive choose layouts.
struct Descs {
  memory::dims src, weights, bias, dst, strides, dilates, pad_l, pad_r;
  tag weights_tag;
  explicit Descs(const Conv2dGeometry& g)
      : src{g.n, g.c, g.h, g.w},
        bias{g.o},
        dst{g.n, g.o, g.oh, g.ow},
        strides{g.stride_h, g.stride_w},
        dilates{g.dil_h - 1, g.dil_w - 1},
        pad_l{g.pad_h, g.pad_w},
        pad_r{(g.oh - 1) * g.stride_h + (g.kh - 1) * g.dil_h + 1 - g.h - g.pad_h,
              (g.ow - 1) * g.stride_w + (g.kw - 1) * g.dil_w + 1 - g.w - g.pad_w} {
    if (g.groups == 1) {
      weights = {g.o, g.c, g.kh, g.kw};
      weights_tag = tag::oihw;
    } else {
      weights = {g.groups, g.o_per_group(), g.c_per_group(), g.kh, g.kw};
      weights_tag = tag::goihw;
    }
  }
  // PyTorch floors the output size, which can leave the last rows unread (negative right padding).
  bool supported() const { return pad_r[0] >= 0 && pad_r[1] >= 0; }
};

dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d, memory::data_type dt, bool with_bias) {
  const memory::desc bias_md = with_bias ? memory::desc(d.bias, memory::data_type::f32, tag::a) : memory::desc();
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                       memory::desc(d.src, dt, tag::any), memory::desc(d.weights, dt, tag::any),
                                       bias_md, memory::desc(d.dst, dt, tag::any), d.strides, d.dilates, d.pad_l,
                                       d.pad_r);
  return {desc, context().engine};
}

// A memory in layout `want` holding the user's plain buffer (reordered in when the layouts differ).
memory to_layout(const memory& user, const memory::desc& want) {
  if (user.get_desc() == want) return user;
  memory m(want, context().engine);
  dnnl::reorder(user, m).execute(context().stream, const_cast<memory&>(user), m);
  return m;
}

// Runs `body` and reports false when oneDNN cannot implement the case.
template <typename F>
bool try_onednn(F&& body) {
  try {
    body();
    context().stream.wait();
    return true;
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) return false;
    throw;
  }
}

}  // namespace

template <typename T>
bool onednn_conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, const float* bias, T* y) {
  const Descs d(g);
  if (!d.supported()) return false;
  return try_onednn([&] {
    const memory::data_type dt = dnnl_type<T>();
    const auto pd = forward_pd(d, dt, bias != nullptr);
    auto& eng = context().engine;
    memory user_src({d.src, dt, tag::nchw}, eng, const_cast<T*>(x));
    memory user_w({d.weights, dt, d.weights_tag}, eng, const_cast<T*>(w));
    memory user_dst({d.dst, dt, tag::nchw}, eng, y);
    const memory src = to_layout(user_src, pd.src_desc()), weights = to_layout(user_w, pd.weights_desc());
    memory dst = pd.dst_desc() == user_dst.get_desc() ? user_dst : memory(pd.dst_desc(), eng);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
    if (bias) args.insert({DNNL_ARG_BIAS, memory({d.bias, memory::data_type::f32, tag::a}, eng, const_cast<float*>(bias))});
    dnnl::convolution_forward(pd).execute(context().stream, args);
    if (dst != user_dst) dnnl::reorder(dst, user_dst).execute(context().stream, dst, user_dst);
  });
}

template <typename T>
bool onednn_conv2d_backward_data(const Conv2dGeometry& g, const T* dy, const T* w, T* dx) {
  const Descs d(g);
  if (!d.supported()) return false;
  return try_onednn([&] {
    const memory::data_type dt = dnnl_type<T>();
    auto& eng = context().engine;
    dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, memory::desc(d.src, dt, tag::any),
                                               memory::desc(d.weights, dt, tag::any), memory::desc(d.dst, dt, tag::any),
                                               d.strides, d.dilates, d.pad_l, d.pad_r);
    const dnnl::convolution_backward_data::primitive_desc pd(desc, eng, forward_pd(d, dt, false));
    memory user_dy({d.dst, dt, tag::nchw}, eng, const_cast<T*>(dy));
    memory user_w({d.weights, dt, d.weights_tag}, eng, const_cast<T*>(w));
    memory user_dx({d.src, dt, tag::nchw}, eng, dx);
    const memory ddst = to_layout(user_dy, pd.diff_dst_desc()), weights = to_layout(user_w, pd.weights_desc());
    memory dsrc = pd.diff_src_desc() == user_dx.get_desc() ? user_dx : memory(pd.diff_src_desc(), eng);
    dnnl::convolution_backward_data(pd).execute(
        context().stream, {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DIFF_SRC, dsrc}});
    if (dsrc != user_dx) dnnl::reorder(dsrc, user_dx).execute(context().stream, dsrc, user_dx);
  });
}

template <typename T>
bool onednn_conv2d_backward_weights(const Conv2dGeometry& g, const T* x, const T* dy, float* dw, float* db) {
  const Descs d(g);
  if (!d.supported()) return false;
  return try_onednn([&] {
    const memory::data_type dt = dnnl_type<T>(), f32 = memory::data_type::f32;
    auto& eng = context().engine;
    const memory::desc bias_md = db ? memory::desc(d.bias, f32, tag::a) : memory::desc();
    dnnl::convolution_backward_weights::desc desc(
        dnnl::algorithm::convolution_direct, memory::desc(d.src, dt, tag::any), memory::desc(d.weights, f32, tag::any),
        bias_md, memory::desc(d.dst, dt, tag::any), d.strides, d.dilates, d.pad_l, d.pad_r);
    const dnnl::convolution_backward_weights::primitive_desc pd(desc, eng, forward_pd(d, dt, db != nullptr));
    memory user_x({d.src, dt, tag::nchw}, eng, const_cast<T*>(x));
    memory user_dy({d.dst, dt, tag::nchw}, eng, const_cast<T*>(dy));
    memory user_dw({d.weights, f32, d.weights_tag}, eng, dw);
    const memory src = to_layout(user_x, pd.src_desc()), ddst = to_layout(user_dy, pd.diff_dst_desc());
    memory dweights = pd.diff_weights_desc() == user_dw.get_desc() ? user_dw : memory(pd.diff_weights_desc(), eng);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_WEIGHTS, dweights}};
    if (db) args.insert({DNNL_ARG_DIFF_BIAS, memory(bias_md, eng, db)});
    dnnl::convolution_backward_weights(pd).execute(context().stream, args);
    if (dweights != user_dw) dnnl::reorder(dweights, user_dw).execute(context().stream, dweights, user_dw);
  });
}

#define MT_ONEDNN_INSTANTIATE_(T)                                                                             \
  template bool onednn_conv2d_forward<T>(const Conv2dGeometry&, const T*, const T*, const float*, T*);     \
  template bool onednn_conv2d_backward_data<T>(const Conv2dGeometry&, const T*, const T*, T*);             \
  template bool onednn_conv2d_backward_weights<T>(const Conv2dGeometry&, const T*, const T*, float*, float*)
MT_ONEDNN_INSTANTIATE_(float);
MT_ONEDNN_INSTANTIATE_(BFloat16);
#undef MT_ONEDNN_INSTANTIATE_

}  // namespace mantissa::cpu

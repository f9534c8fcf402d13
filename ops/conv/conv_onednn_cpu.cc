// oneDNN convolution calls: build the descriptors from a Conv2dGeometry (grouped weights as GOIHW,
// oneDNN's dilation is ours minus one, right padding follows from the output size), let oneDNN choose
// layouts (format_tag::any), and reorder plain user buffers into and out of them.
// Everything that depends only on the problem (the convolution primitive and the reorders around it) is
// built once and cached, keyed by pass, dtype and geometry; the blocked intermediates and scratchpads live
// in per-thread buffers that are reused, so a steady-state call creates nothing and takes no fresh pages.
#include "ops/conv/conv_onednn_cpu.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "framework/error.h"

namespace mantissa::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}
dnnl::stream& cpu_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
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

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d, memory::data_type dt, bool with_bias) {
  const memory::desc bias_md = with_bias ? memory::desc(d.bias, memory::data_type::f32, tag::a) : memory::desc();
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                       memory::desc(d.src, dt, tag::any), memory::desc(d.weights, dt, tag::any),
                                       bias_md, memory::desc(d.dst, dt, tag::any), d.strides, d.dilates, d.pad_l,
                                       d.pad_r);
  return {desc, user_scratchpad(), cpu_engine()};
}

// One argument of a cached primitive: the user's plain layout and the primitive's, and the reorder
// between them when they differ (user -> primitive for inputs, primitive -> user for outputs).
struct Arg {
  int id = 0;
  memory::desc user, inner;
  std::optional<dnnl::reorder> reorder;
  memory::desc reorder_scratchpad;
};

Arg make_arg(int id, const memory::desc& user, const memory::desc& inner, bool is_output) {
  Arg a{.id = id, .user = user, .inner = inner};
  if (user != inner) {
    const dnnl::reorder::primitive_desc pd =
        is_output ? dnnl::reorder::primitive_desc(cpu_engine(), inner, cpu_engine(), user, user_scratchpad())
                  : dnnl::reorder::primitive_desc(cpu_engine(), user, cpu_engine(), inner, user_scratchpad());
    a.reorder = dnnl::reorder(pd);
    a.reorder_scratchpad = pd.scratchpad_desc();
  }
  return a;
}

struct Entry {
  dnnl::primitive primitive;
  memory::desc scratchpad;
  std::vector<Arg> inputs, outputs;  // in the order of the call's pointers
};

// Per-thread buffers, grown as needed and kept (64-byte aligned, as oneDNN wants). Slot 0 is the
// primitive's scratchpad, the last slot a reorder's; slots 1.. hold the blocked copies of the arguments.
constexpr size_t kReorderSlot = 7;
void* buffer(size_t slot, size_t bytes) {
  struct Buffer {
    void* ptr = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(ptr); }
  };
  thread_local std::array<Buffer, 8> buffers;
  Buffer& b = buffers.at(slot);
  if (bytes > b.size) {
    std::free(b.ptr);
    b.size = (bytes + 63) / 64 * 64;
    b.ptr = std::aligned_alloc(64, b.size);
    MT_CHECK(b.ptr != nullptr, "conv2d: out of memory allocating a ", b.size, "-byte oneDNN buffer");
  }
  return b.ptr;
}

void run_reorder(const Arg& a, memory& from, memory& to) {
  std::unordered_map<int, memory> args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  if (a.reorder_scratchpad.get_size() > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 memory(a.reorder_scratchpad, cpu_engine(), buffer(kReorderSlot, a.reorder_scratchpad.get_size())));
  }
  a.reorder->execute(cpu_stream(), args);
}

// Runs a cached entry on user pointers: reorders the inputs in, runs the primitive, reorders the outputs out.
void execute(const Entry& e, const std::vector<const void*>& in, const std::vector<void*>& out) {
  auto& eng = cpu_engine();
  std::unordered_map<int, memory> args;
  size_t slot = 1;
  for (size_t i = 0; i < e.inputs.size(); ++i) {
    const Arg& a = e.inputs[i];
    memory user(a.user, eng, const_cast<void*>(in[i]));  // oneDNN's handle API is not const-aware
    if (!a.reorder) {
      args.emplace(a.id, user);
      continue;
    }
    memory inner(a.inner, eng, buffer(slot++, a.inner.get_size()));
    run_reorder(a, user, inner);
    args.emplace(a.id, inner);
  }
  std::vector<std::pair<const Arg*, memory>> pending;  // outputs to reorder out after the primitive
  for (size_t i = 0; i < e.outputs.size(); ++i) {
    const Arg& a = e.outputs[i];
    memory user(a.user, eng, out[i]);
    if (!a.reorder) {
      args.emplace(a.id, user);
      continue;
    }
    memory inner(a.inner, eng, buffer(slot++, a.inner.get_size()));
    args.emplace(a.id, inner);
    pending.emplace_back(&a, user);
  }
  if (e.scratchpad.get_size() > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(e.scratchpad, eng, buffer(0, e.scratchpad.get_size())));
  }
  e.primitive.execute(cpu_stream(), args);
  for (auto& [a, user] : pending) run_reorder(*a, args.at(a->id), user);
  cpu_stream().wait();
}

enum class Pass : int64_t { kForward, kBackwardData, kBackwardWeights };

// The cache key: pass, dtype, whether a bias is involved, and every geometry field.
using Key = std::array<int64_t, 19>;
Key make_key(Pass pass, memory::data_type dt, bool bias, const Conv2dGeometry& g) {
  Key key{static_cast<int64_t>(pass), static_cast<int64_t>(dt), bias};
  std::ranges::copy(g.fields(), key.begin() + 3);
  return key;
}
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the 64-bit words
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

std::shared_ptr<const Entry> create(Pass pass, memory::data_type dt, bool bias, const Conv2dGeometry& g) {
  const Descs d(g);
  const auto f32 = memory::data_type::f32;
  const memory::desc src(d.src, dt, tag::nchw), dst(d.dst, dt, tag::nchw), bias_md(d.bias, f32, tag::a);
  auto e = std::make_shared<Entry>();
  switch (pass) {
    case Pass::kForward: {  // in: x, w, [bias]; out: y
      const auto pd = forward_pd(d, dt, bias);
      e->primitive = dnnl::convolution_forward(pd);
      e->scratchpad = pd.scratchpad_desc();
      e->inputs = {make_arg(DNNL_ARG_SRC, src, pd.src_desc(), false),
                   make_arg(DNNL_ARG_WEIGHTS, memory::desc(d.weights, dt, d.weights_tag), pd.weights_desc(), false)};
      if (bias) e->inputs.push_back(make_arg(DNNL_ARG_BIAS, bias_md, bias_md, false));
      e->outputs = {make_arg(DNNL_ARG_DST, dst, pd.dst_desc(), true)};
      break;
    }
    case Pass::kBackwardData: {  // in: dy, w; out: dx
      dnnl::convolution_backward_data::desc desc(
          dnnl::algorithm::convolution_direct, memory::desc(d.src, dt, tag::any), memory::desc(d.weights, dt, tag::any),
          memory::desc(d.dst, dt, tag::any), d.strides, d.dilates, d.pad_l, d.pad_r);
      const dnnl::convolution_backward_data::primitive_desc pd(desc, user_scratchpad(), cpu_engine(),
                                                               forward_pd(d, dt, false));
      e->primitive = dnnl::convolution_backward_data(pd);
      e->scratchpad = pd.scratchpad_desc();
      e->inputs = {make_arg(DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), false),
                   make_arg(DNNL_ARG_WEIGHTS, memory::desc(d.weights, dt, d.weights_tag), pd.weights_desc(), false)};
      e->outputs = {make_arg(DNNL_ARG_DIFF_SRC, src, pd.diff_src_desc(), true)};
      break;
    }
    case Pass::kBackwardWeights: {  // in: x, dy; out: dw (f32), [db (f32)]
      dnnl::convolution_backward_weights::desc desc(
          dnnl::algorithm::convolution_direct, memory::desc(d.src, dt, tag::any),
          memory::desc(d.weights, f32, tag::any), bias ? bias_md : memory::desc(), memory::desc(d.dst, dt, tag::any),
          d.strides, d.dilates, d.pad_l, d.pad_r);
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, user_scratchpad(), cpu_engine(),
                                                                  forward_pd(d, dt, bias));
      e->primitive = dnnl::convolution_backward_weights(pd);
      e->scratchpad = pd.scratchpad_desc();
      e->inputs = {make_arg(DNNL_ARG_SRC, src, pd.src_desc(), false),
                   make_arg(DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), false)};
      e->outputs = {
          make_arg(DNNL_ARG_DIFF_WEIGHTS, memory::desc(d.weights, f32, d.weights_tag), pd.diff_weights_desc(), true)};
      if (bias) e->outputs.push_back(make_arg(DNNL_ARG_DIFF_BIAS, bias_md, bias_md, true));
      break;
    }
  }
  return e;
}

// The cached entry for the problem, or null when oneDNN has no implementation for it (remembered too).
// The cache is bounded: a program that keeps producing new shapes drops it and starts over.
constexpr size_t kMaxCachedPrimitives = 256;

std::shared_ptr<const Entry> lookup(Pass pass, memory::data_type dt, bool bias, const Conv2dGeometry& g) {
  static std::mutex mu;
  static std::unordered_map<Key, std::shared_ptr<const Entry>, KeyHash> cache;
  const Key key = make_key(pass, dt, bias, g);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  std::shared_ptr<const Entry> e;
  try {
    e = create(pass, dt, bias, g);  // outside the lock: creation JIT-compiles kernels
  } catch (const dnnl::error& err) {
    if (err.status != dnnl_unimplemented) throw;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= kMaxCachedPrimitives) cache.clear();
  cache.emplace(key, e);
  return e;
}

}  // namespace

template <typename T>
bool onednn_conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, const float* bias, T* y) {
  if (!Descs(g).supported()) return false;
  const auto e = lookup(Pass::kForward, dnnl_type<T>(), bias != nullptr, g);
  if (!e) return false;
  std::vector<const void*> in{x, w};
  if (bias) in.push_back(bias);
  execute(*e, in, {y});
  return true;
}

template <typename T>
bool onednn_conv2d_backward_data(const Conv2dGeometry& g, const T* dy, const T* w, T* dx) {
  if (!Descs(g).supported()) return false;
  const auto e = lookup(Pass::kBackwardData, dnnl_type<T>(), false, g);
  if (!e) return false;
  execute(*e, {dy, w}, {dx});
  return true;
}

template <typename T>
bool onednn_conv2d_backward_weights(const Conv2dGeometry& g, const T* x, const T* dy, float* dw, float* db) {
  if (!Descs(g).supported()) return false;
  const auto e = lookup(Pass::kBackwardWeights, dnnl_type<T>(), db != nullptr, g);
  if (!e) return false;
  std::vector<void*> out{dw};
  if (db) out.push_back(db);
  execute(*e, {x, dy}, out);
  return true;
}

#define MT_ONEDNN_INSTANTIATE_(T)                                                                      \
  template bool onednn_conv2d_forward<T>(const Conv2dGeometry&, const T*, const T*, const float*, T*); \
  template bool onednn_conv2d_backward_data<T>(const Conv2dGeometry&, const T*, const T*, T*);         \
  template bool onednn_conv2d_backward_weights<T>(const Conv2dGeometry&, const T*, const T*, float*, float*)
MT_ONEDNN_INSTANTIATE_(float);
MT_ONEDNN_INSTANTIATE_(BFloat16);
#undef MT_ONEDNN_INSTANTIATE_

}  // namespace mantissa::cpu

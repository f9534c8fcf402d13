// oneDNN matmul with a primitive cache keyed by the full problem (types, dims, strides, alpha, beta).
// Scratchpads are per call (user mode), so one cached primitive may run on several threads at once.
#include "ops/matmul/onednn_matmul_cpu.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "framework/error.h"

namespace mantissa::cpu {
namespace {

// The cache key: every field of MatmulProblem, flattened (alpha and beta by their bits).
using Key = std::array<int64_t, 30>;

Key make_key(const MatmulProblem& p) {
  Key k{};
  size_t i = 0;
  k[i++] = static_cast<int64_t>(p.type);
  for (const MatmulOperand* o : {&p.a, &p.b, &p.c}) {
    k[i++] = o->batch;
    k[i++] = o->rows;
    k[i++] = o->cols;
    for (int64_t s : o->strides) k[i++] = s;
  }
  uint32_t alpha_bits, beta_bits;
  std::memcpy(&alpha_bits, &p.alpha, 4);
  std::memcpy(&beta_bits, &p.beta, 4);
  k[i++] = alpha_bits;
  k[i++] = beta_bits;
  return k;
}

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the 64-bit words
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct Entry {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, scratchpad;
  size_t scratchpad_bytes = 0;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory::desc operand_desc(const MatmulOperand& o, dnnl::memory::data_type dt) {
  return dnnl::memory::desc({o.batch, o.rows, o.cols}, dt, {o.strides[0], o.strides[1], o.strides[2]});
}

std::shared_ptr<Entry> create(const MatmulProblem& p) {
  auto e = std::make_shared<Entry>();
  using dt = dnnl::memory::data_type;
  const dt operands = p.type == MatmulType::kF32 ? dt::f32 : dt::bf16;
  e->a = operand_desc(p.a, operands);
  e->b = operand_desc(p.b, operands);
  e->c = operand_desc(p.c, p.type == MatmulType::kBF16 ? dt::bf16 : dt::f32);
  dnnl::primitive_attr attr;
  if (p.alpha != 1.0f) attr.set_output_scales(0, {p.alpha});
  if (p.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(p.beta);
    attr.set_post_ops(ops);
  }
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e->a, e->b, e->c), attr, cpu_engine());
  e->primitive = dnnl::matmul(pd);
  e->scratchpad = pd.scratchpad_desc();
  e->scratchpad_bytes = e->scratchpad.get_size();
  return e;
}

// The cache is bounded: a program that keeps producing new shapes drops it and starts over.
constexpr size_t kMaxCachedPrimitives = 1024;

std::shared_ptr<Entry> lookup(const MatmulProblem& p) {
  static std::mutex mu;
  static std::unordered_map<Key, std::shared_ptr<Entry>, KeyHash> cache;
  const Key key = make_key(p);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  std::shared_ptr<Entry> e;
  try {
    e = create(p);  // outside the lock: creation JIT-compiles kernels
  } catch (const dnnl::error& err) {
    MT_ASSERT(false, "oneDNN matmul could not be created for this problem: ", err.what());
  }
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= kMaxCachedPrimitives) cache.clear();
  cache.emplace(key, e);
  return e;
}

// Per-thread scratchpad, grown as needed and reused (64-byte aligned, as oneDNN wants).
void* scratchpad(size_t bytes) {
  struct Buffer {
    void* ptr = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(ptr); }
  };
  thread_local Buffer buf;
  if (bytes > buf.size) {
    std::free(buf.ptr);
    buf.size = (bytes + 63) / 64 * 64;
    buf.ptr = std::aligned_alloc(64, buf.size);
    MT_CHECK(buf.ptr != nullptr, "matmul: out of memory allocating a ", buf.size, "-byte GEMM scratchpad");
  }
  return buf.ptr;
}

}  // namespace

void onednn_matmul(const MatmulProblem& p, const void* a, const void* b, void* c) {
  std::shared_ptr<Entry> e = lookup(p);
  dnnl::engine& eng = cpu_engine();
  thread_local dnnl::stream stream(eng);
  dnnl::memory am(e->a, eng, const_cast<void*>(a));  // oneDNN's handle API is not const-aware
  dnnl::memory bm(e->b, eng, const_cast<void*>(b));
  dnnl::memory cm(e->c, eng, c);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (e->scratchpad_bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(e->scratchpad, eng, scratchpad(e->scratchpad_bytes)));
  }
  e->primitive.execute(stream, args);
  stream.wait();
}

}  // namespace mantissa::cpu

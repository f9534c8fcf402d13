// CUDA tensors against the CPU: round trips of every dtype (non-contiguous views on either side), device
// casts bit for bit, fill_ and accumulate_, the caching allocator in a loop, pinned asynchronous copies,
// item()/str(), Module::to, and the errors without a device. Device outputs are poisoned (all bytes 0xFF:
// NaN, -1, a non-canonical bool) first, so an element a kernel fails to write shows. Every comparison is
// exact: copies and casts move or round bits the same way on both sides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "framework/cuda/allocator.h"
#include "framework/cuda/device.h"
#include "framework/module.h"
#include "framework/random.h"
#include "framework/tensor.h"
#include "tests/support/cuda_skip.h"

#ifdef MANTISSA_WITH_CUDA
#include <cuda_runtime_api.h>

#include "framework/cuda/stream.h"
#endif

namespace mantissa {
namespace {

const std::vector<DType> kAllDTypes = {DType::kF32, DType::kF64,  DType::kF16,    DType::kBF16,  DType::kI64,
                                       DType::kI32, DType::kBool, DType::kF8E4M3, DType::kF8E5M2};

// Deterministic values with zeros, negatives, fractions and ties, finite in every dtype (|v| < 65504).
[[maybe_unused]] Tensor sample(const Shape& shape, DType dtype) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<double>(static_cast<int64_t>(i * 37 % 23) - 11) * 0.75 + (i % 5 == 0 ? 0.0 : 1.0 / 3);
    if (i % 7 == 0) v[i] = 0.0;
  }
  return from_vector<double>(v, shape).to(dtype);
}

// The bytes of a CPU tensor's elements in row-major order.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  EXPECT_TRUE(t.device().is_cpu());
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  return std::vector<unsigned char>(p, p + static_cast<size_t>(c.numel()) * element_size(c.dtype()));
}

[[maybe_unused]] void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_TRUE(bytes_of(got) == bytes_of(want)) << what << "\n got " << got.str() << "\nwant " << want.str();
}

// A CPU tensor with every byte 0xFF.
[[maybe_unused]] Tensor poisoned_cpu(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, {.dtype = dtype});
  std::memset(t.data_ptr(), 0xFF, static_cast<size_t>(t.numel()) * element_size(dtype));
  return t;
}

struct Inner : Module {
  Tensor bias = register_parameter("bias", from_vector<float>({0.5f, -0.5f}));
  Tensor steps = register_buffer("steps", full({}, 7.0, {.dtype = DType::kI64}));
};

struct Outer : Module {
  Tensor weight = register_parameter("weight", randn({2, 3}));
  std::shared_ptr<Inner> inner = register_module("inner", std::make_shared<Inner>());
};

#ifdef MANTISSA_WITH_CUDA

// A tensor on GPU 0 with every byte 0xFF, set on the stream the copies use.
Tensor poisoned(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, {.dtype = dtype, .device = cuda(0)});
  const size_t n = static_cast<size_t>(t.numel()) * element_size(dtype);
  if (n > 0) {
    EXPECT_EQ(cudaMemsetAsync(t.data_ptr(), 0xFF, n, gpu::current_stream(0)), cudaSuccess);
  }
  return t;
}

Tensor to_host(const Tensor& t) {
  Tensor h = poisoned_cpu(t.shape(), t.dtype());
  copy_(h, t);
  return h;
}

TEST(CudaTensor, RoundTripOfEveryDType) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType d : kAllDTypes) {
    const Tensor cpu = sample({3, 4, 5}, d);
    const Tensor g = poisoned({3, 4, 5}, d);
    copy_(g, cpu);
    EXPECT_EQ(g.device(), cuda(0));
    expect_same_bits(to_host(g), cpu, std::string("round trip ") + std::string(dtype_name(d)));
    expect_same_bits(cpu.to(cuda(0)).to(kCPU), cpu, "Tensor::to round trip");
  }
  const Tensor none = empty({0, 3}, {.device = cuda(0)});
  EXPECT_EQ(none.to(kCPU).numel(), 0);
}

TEST(CudaTensor, NonContiguousViewsOnEitherSide) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType d : kAllDTypes) {
    const std::string name(dtype_name(d));
    const Tensor cpu = sample({4, 6, 5}, d);
    const Tensor cpu_view = cpu.permute({2, 0, 1}).slice(2, 1, 6, 2);  // [5, 4, 3]
    const Tensor want = cpu_view.contiguous();
    // Host view -> device.
    const Tensor g = poisoned(want.shape(), d);
    copy_(g, cpu_view);
    expect_same_bits(to_host(g), want, "H2D from a strided view, " + name);
    // Device view -> host, and device view -> device (the strided kernel).
    const Tensor dev = cpu.to(cuda(0));
    const Tensor dev_view = dev.permute({2, 0, 1}).slice(2, 1, 6, 2);
    expect_same_bits(to_host(dev_view), want, "D2H from a strided view, " + name);
    const Tensor packed = poisoned(want.shape(), d);
    copy_(packed, dev_view);
    expect_same_bits(to_host(packed), want, "D2D from a strided view, " + name);
    // Strided destinations: on the device (from host and from device) and on the host.
    const Tensor dst = poisoned({4, 6, 5}, d);
    copy_(dst.permute({2, 0, 1}), cpu.permute({2, 0, 1}));
    expect_same_bits(to_host(dst), cpu, "H2D into a strided view, " + name);
    const Tensor dst2 = poisoned({5, 6, 4}, d);
    copy_(dst2.transpose(0, 2), dev);
    expect_same_bits(to_host(dst2), cpu.transpose(0, 2).contiguous(), "D2D into a strided view, " + name);
    const Tensor host_dst = poisoned_cpu({5, 6, 4}, d);
    copy_(host_dst.transpose(0, 2), dev);
    expect_same_bits(host_dst, cpu.transpose(0, 2).contiguous(), "D2H into a strided view, " + name);
  }
}

TEST(CudaTensor, DeviceCastsEqualCpuCastsBitForBit) {
  MT_SKIP_WITHOUT_CUDA();
  const std::vector<double> float_only = {INFINITY, -INFINITY, NAN, 1e30, 70000.0, -1e-45, 65520.0, 1e-8, 6e-8};
  for (DType from : kAllDTypes) {
    const Tensor src = sample({4, 5}, from);
    const Tensor dev_src = src.to(cuda(0));
    for (DType to : kAllDTypes) {
      const std::string what = std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to));
      const Tensor want = src.to(to);
      const Tensor contiguous = poisoned({4, 5}, to);
      copy_(contiguous, dev_src);  // the contiguous cast kernel
      expect_same_bits(to_host(contiguous), want, what);
      const Tensor transposed = poisoned({5, 4}, to);
      copy_(transposed, dev_src.t());  // the strided cast kernel
      expect_same_bits(to_host(transposed), want.t().contiguous(), what + " (strided)");
      const Tensor from_host = poisoned({4, 5}, to);
      copy_(from_host, src);  // H2D with a cast
      expect_same_bits(to_host(from_host), want, what + " (H2D)");
      const Tensor to_host_cast = poisoned_cpu({4, 5}, to);
      copy_(to_host_cast, dev_src);  // D2H with a cast
      expect_same_bits(to_host_cast, want, what + " (D2H)");
      const auto floating = [](DType d) { return is_floating(d) || is_float8(d); };
      if (floating(from) && (floating(to) || to == DType::kBool)) {
        // inf, nan, overflow and subnormals: floating destinations only (to an integer they are UB).
        const Tensor wide = from_vector<double>(float_only).to(from);
        const Tensor out = poisoned(wide.shape(), to);
        copy_(out, wide.to(cuda(0)));
        expect_same_bits(to_host(out), wide.to(to), what + " (inf/nan/overflow)");
      }
    }
  }
}

TEST(CudaTensor, FillAndAccumulateMatchTheCpu) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType d : kAllDTypes) {
    const std::string name(dtype_name(d));
    const Tensor g = poisoned({6, 7}, d);
    fill_(g, 2.5);
    expect_same_bits(to_host(g), full({6, 7}, 2.5, {.dtype = d}), "fill_ " + name);
    fill_(g.t().slice(0, 0, 7, 2), -1.25);  // a strided view: every other column
    const Tensor want = full({6, 7}, 2.5, {.dtype = d});
    fill_(want.t().slice(0, 0, 7, 2), -1.25);
    expect_same_bits(to_host(g), want, "strided fill_ " + name);
  }
  for (DType d : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    const std::string name(dtype_name(d));
    const Tensor a = randn({33, 17}).to(d);
    const Tensor b = randn({33, 17}).to(d);
    const Tensor ga = a.to(cuda(0));
    accumulate_(ga, b.to(cuda(0)));
    const Tensor want = a.clone();
    accumulate_(want, b);
    expect_same_bits(to_host(ga), want, "accumulate_ " + name);
    accumulate_(ga.t(), b.t().contiguous().to(cuda(0)));  // strided destination and source strides differ
    accumulate_(want.t(), b.t().contiguous());
    expect_same_bits(to_host(ga), want, "strided accumulate_ " + name);
  }
}

TEST(CudaTensor, PeerCopyIsOrderedWithBothStreams) {
  if (cuda_device_count() < 2) {
    GTEST_SKIP() << "needs two CUDA devices, " << cuda_device_count() << " present";
  }
  // 64 MiB, so that the peer copy is still running when the next work reaches GPU 0's stream: an in-place
  // write to the source queued right after the copy must not change what arrives on GPU 1.
  const Tensor cpu = sample({16 << 20}, DType::kF32);
  const Tensor src = cpu.to(cuda(0));
  const Tensor dst = src.to(cuda(1));
  fill_(src, -3.0);
  expect_same_bits(dst.to(kCPU), cpu, "peer copy, then an in-place write of the source");
  // The packed path (a cast and a strided view), whose temporary block is freed at once and reused.
  const Tensor view = cpu.reshape({4096, 4096}).t();
  const Tensor src16 = cpu.reshape({4096, 4096}).to(cuda(0)).t();
  Tensor dst16 = empty({4096, 4096}, {.dtype = DType::kBF16, .device = cuda(1)});
  copy_(dst16, src16);
  const Tensor scribble = full({16 << 19}, -5.0, {.device = cuda(0)});  // may reuse the packed block
  expect_same_bits(dst16.to(kCPU), view.to(DType::kBF16), "peer copy of a cast, strided view");
}

TEST(CudaTensor, SteadyStateLoopMakesNoCudaMalloc) {
  MT_SKIP_WITHOUT_CUDA();
  auto step = [] {
    const Tensor a = full({256, 256}, 1.5, {.device = cuda(0)});   // 256 KiB: the small pool
    const Tensor b = a.to(DType::kBF16);                           // a D2D cast
    const Tensor c = empty({3, 1000, 1000}, {.device = cuda(0)});  // 12 MB: a large segment
    fill_(c, 0.0);
    const Tensor back = b.to(kCPU);  // D2H syncs
    EXPECT_EQ(static_cast<float>(back.data<BFloat16>()[0]), 1.5f);
  };
  step();  // the first step fills the cache
  const gpu::CachingAllocatorStats before = cuda_memory_stats(0);
  for (int i = 0; i < 5; ++i) step();
  const gpu::CachingAllocatorStats after = cuda_memory_stats(0);
  EXPECT_EQ(after.device_mallocs, before.device_mallocs);
  EXPECT_GE(after.cache_hits - before.cache_hits, 15u);  // three device tensors per step
  EXPECT_GE(after.peak_allocated_bytes, uint64_t{12'000'000});
  EXPECT_GE(after.reserved_bytes, after.allocated_bytes);
  cuda_empty_cache();
  EXPECT_LE(cuda_memory_stats(0).reserved_bytes, after.reserved_bytes);
}

TEST(CudaTensor, PinnedMemoryCopiesAsynchronously) {
  MT_SKIP_WITHOUT_CUDA();
  const Tensor cpu = sample({1 << 16}, DType::kF32);
  EXPECT_FALSE(is_pinned(cpu));
  Tensor pinned = pin_memory(cpu);
  EXPECT_TRUE(is_pinned(pinned));
  EXPECT_TRUE(pin_memory(pinned).is_same(pinned));  // already pinned and contiguous
  expect_same_bits(pinned, cpu, "pin_memory");
  const Tensor g = poisoned({1 << 16}, DType::kF32);
  copy_(g, pinned);  // asynchronous on the current stream
  // Free the source and write over whatever pinned block comes next: the allocator must not hand out the
  // block still being copied from before the copy has finished.
  pinned = Tensor();
  const Tensor scribble = empty_pinned({1 << 16}, DType::kF32);
  std::fill_n(scribble.data<float>(), 1 << 16, -7.0f);
  expect_same_bits(to_host(g), cpu, "H2D from pinned memory");
  // Pageable sources are staged through cached pinned blocks: no new cudaHostAlloc in a loop.
  copy_(g, cpu);
  const uint64_t host_allocs = pinned_memory_stats().device_mallocs;
  for (int i = 0; i < 5; ++i) {
    copy_(g, cpu);
    gpu::synchronize(0);  // the staging block's event completes, so the next copy can reuse it
  }
  EXPECT_EQ(pinned_memory_stats().device_mallocs, host_allocs);
  expect_same_bits(to_host(g), cpu, "H2D staged through pinned memory");
}

TEST(CudaTensor, ItemAndStrCopyToTheHost) {
  MT_SKIP_WITHOUT_CUDA();
  EXPECT_EQ(full({}, 3.5, {.device = cuda(0)}).item(), 3.5);
  EXPECT_EQ(full({1, 1}, -2.0, {.dtype = DType::kBF16, .device = cuda(0)}).item(), -2.0);
  const std::string s = full({3}, 1.25, {.device = cuda(0)}).str();
  EXPECT_NE(s.find("device=cuda:0"), std::string::npos) << s;
  EXPECT_NE(s.find("1.25"), std::string::npos) << s;
}

TEST(CudaTensor, ModuleToMovesParametersBuffersAndGradsInPlace) {
  MT_SKIP_WITHOUT_CUDA();
  Outer m;
  m.weight.set_grad(ones({2, 3}));
  const Tensor weight_before = m.weight.clone();
  const TensorImpl* impl = m.weight.impl();
  std::vector<std::string> names;
  for (const auto& p : m.named_parameters()) names.push_back(p.name);

  m.to(cuda(0));
  EXPECT_EQ(m.weight.impl(), impl);  // the same tensor: handles held elsewhere see the move
  EXPECT_EQ(m.weight.device(), cuda(0));
  EXPECT_EQ(m.inner->bias.device(), cuda(0));
  EXPECT_EQ(m.inner->steps.device(), cuda(0));
  EXPECT_EQ(m.weight.grad().device(), cuda(0));
  EXPECT_TRUE(m.weight.is_leaf());
  EXPECT_TRUE(m.weight.requires_grad());
  std::vector<std::string> after;
  for (const auto& p : m.named_parameters()) after.push_back(p.name);
  EXPECT_EQ(after, names);
  expect_same_bits(to_host(m.weight), weight_before, "weight on the GPU");
  EXPECT_EQ(m.inner->steps.item(), 7.0);

  m.to(kCPU);
  EXPECT_EQ(m.weight.device(), kCPU);
  expect_same_bits(m.weight, weight_before, "weight back on the CPU");
  expect_same_bits(m.weight.grad(), ones({2, 3}), "grad back on the CPU");
}

TEST(CudaTensor, MissingDeviceIndexIsNamed) {
  MT_SKIP_WITHOUT_CUDA();
  const int missing = cuda_device_count();
  try {
    empty({2}, {.device = cuda(missing)});
    FAIL() << "allocated on a GPU that does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(cuda(missing).str()), std::string::npos) << e.what();
  }
  try {
    accumulate_(zeros({2}), zeros({2}, {.device = cuda(0)}));
    FAIL() << "accumulated across devices";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different devices"), std::string::npos) << e.what();
  }
}

TEST(CudaTensor, FactoriesHonourTheDevice) {
  MT_SKIP_WITHOUT_CUDA();
  const Tensor v = from_vector<float>({1.5f, -2.0f, 3.25f}, {3}, {.dtype = DType::kF16, .device = cuda(0)});
  EXPECT_EQ(v.device(), cuda(0));
  expect_same_bits(to_host(v), from_vector<float>({1.5f, -2.0f, 3.25f}).to(DType::kF16), "from_vector");
  const Tensor r = arange(5, {.dtype = DType::kI64, .device = cuda(0)});
  EXPECT_EQ(r.device(), cuda(0));
  expect_same_bits(to_host(r), arange(5), "arange");
  const Tensor z = zeros({2, 3}, {.dtype = DType::kBF16, .device = cuda(0)});
  expect_same_bits(to_host(z), zeros({2, 3}, {.dtype = DType::kBF16}), "zeros");
}

#endif  // MANTISSA_WITH_CUDA

// Without a GPU (this build without CUDA, or no device present) every way onto a GPU says which device
// and why.
TEST(CudaTensor, WithoutADeviceErrorsNameTheDeviceAndWhy) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto expect_error = [](const auto& fn, const std::string& needle, const std::string& what) {
    try {
      fn();
      ADD_FAILURE() << what << " did not throw";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << what << ": " << msg;
#ifdef MANTISSA_WITH_CUDA
      EXPECT_NE(msg.find(cuda_unavailable_reason()), std::string::npos) << what << ": " << msg;
#endif
    }
  };
  expect_error([] { empty({2}, {.device = cuda(0)}); }, "cuda:0", "empty on cuda:0");
  expect_error([] { zeros({2}).to(cuda(0)); }, "cuda:0", "to(cuda:0)");
  expect_error([] { from_vector<float>({1.0f}, {1}, {.device = cuda(0)}); }, "cuda:0", "from_vector");
  Outer m;
  expect_error([&] { m.to(cuda(0)); }, "Module.to(cuda:0): no such CUDA device", "Module::to");
  EXPECT_EQ(m.weight.device(), kCPU);  // nothing moved
  expect_error([] { pin_memory(zeros({2})); }, "cuda:0", "pin_memory");
  expect_error([] { cuda_memory_stats(0); }, "cuda:0", "cuda_memory_stats");
  EXPECT_FALSE(is_pinned(zeros({2})));
}

}  // namespace
}  // namespace mantissa

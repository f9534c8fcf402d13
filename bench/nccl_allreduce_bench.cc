// NCCL all-reduce bandwidth on the GPUs of this process group (one GPU without mpirun): the algorithm
// bandwidth (bytes / time) and NCCL's bus bandwidth (algbw * 2 (n - 1) / n) for f32 and bf16 buffers from
// 1 MiB to 1 GiB. Skips with a message without a GPU.
#include <benchmark/benchmark.h>

#include "framework/cuda/device.h"
#include "framework/dist/nccl_process_group.h"

namespace mantissa {
namespace {

ProcessGroup* nccl_group() {
  static std::unique_ptr<ProcessGroup> world = init_process_group();
  static std::unique_ptr<ProcessGroup> nccl = make_nccl_process_group(*world, cuda(world->local_rank()));
  return nccl.get();
}

void BM_AllReduce(benchmark::State& state, DType dtype) {
  if (cuda_device_count() == 0) {
    state.SkipWithError(("no CUDA device: " + cuda_unavailable_reason()).c_str());
    return;
  }
  ProcessGroup* pg = nccl_group();
  const int64_t bytes = state.range(0);
  Tensor t =
      zeros({bytes / static_cast<int64_t>(element_size(dtype))}, {.dtype = dtype, .device = cuda(pg->local_rank())});
  pg->all_reduce(t, ReduceOp::kSum);  // warm-up: NCCL sets up its channels on the first call
  pg->barrier();
  for (auto _ : state) {
    for (int i = 0; i < 10; ++i) pg->all_reduce(t, ReduceOp::kSum);
    pg->barrier();  // blocks the host until the GPU has done them
  }
  const double n = pg->size();
  // Rates per second of wall time, 10 all-reduces per iteration.
  state.counters["algbw_GBps"] =
      benchmark::Counter(static_cast<double>(bytes) * 10 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw_GBps"] =
      benchmark::Counter(static_cast<double>(bytes) * 10 / 1e9 * (n > 1 ? 2 * (n - 1) / n : 1.0),
                         benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_AllReduce, f32, DType::kF32)->RangeMultiplier(8)->Range(1 << 20, 1 << 30)->UseRealTime();
BENCHMARK_CAPTURE(BM_AllReduce, bf16, DType::kBF16)->RangeMultiplier(8)->Range(1 << 20, 1 << 30)->UseRealTime();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();

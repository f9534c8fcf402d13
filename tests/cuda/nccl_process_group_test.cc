// The NCCL process group in a world of one GPU (a CI machine has none: those cases skip; the refusal
// without a GPU runs everywhere). Several ranks need several GPUs: the reductions' arithmetic across ranks
// is NCCL's, and the MPI backend's tests (tests/dist) cover the DDP logic above the group.
#include "framework/dist/nccl_process_group.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "framework/cuda/device.h"
#include "framework/error.h"
#include "framework/random.h"
#include "tests/support/cuda_skip.h"

namespace mantissa {
namespace {

TEST(NcclProcessGroup, RefusesWithoutAGpu) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto local = make_local_process_group();
  try {
    make_nccl_process_group(*local, cuda(0));
    FAIL() << "make_nccl_process_group without a GPU returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

// The dispatching group sends CPU tensors to its CPU group (here two worlds of one stand in for MPI and
// NCCL: a CPU tensor must reach the first, and the pairing is checked).
TEST(DeviceDispatchGroup, CpuTensorsGoToTheCpuGroup) {
  auto group = make_device_dispatch_group(make_local_process_group(), make_local_process_group());
  EXPECT_EQ(group->backend(), "cpu:mpi,cuda:nccl");
  EXPECT_EQ(group->size(), 1);
  Tensor t = full({3}, 2.0);
  group->all_reduce(t, ReduceOp::kSum);
  EXPECT_EQ(t.data<float>()[2], 2.0f);
  EXPECT_EQ(group->all_gather(t).shape(), (Shape{1, 3}));
  group->barrier();
  EXPECT_THROW(make_device_dispatch_group(make_local_process_group(), nullptr), Error);
}

class NcclWorldOfOne : public ::testing::Test {
 protected:
  void SetUp() override {
    MT_SKIP_WITHOUT_CUDA();
    local_ = make_local_process_group();
    nccl_ = make_nccl_process_group(*local_, cuda(0), {.timeout = std::chrono::seconds(60)});
  }
  std::unique_ptr<ProcessGroup> local_, nccl_;
};

TEST_F(NcclWorldOfOne, AllReduceOfOneRankIsTheInputInEveryDtype) {
  EXPECT_EQ(nccl_->size(), 1);
  EXPECT_EQ(nccl_->backend(), "nccl");
  for (DType d : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    const Tensor host = randn({1000}).to(d);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      Tensor dev = host.to(cuda(0));
      nccl_->all_reduce(dev, op);
      // One rank: sum, avg and max are the identity; 16-bit values go through f32 and back, exactly.
      const Tensor back = dev.to(kCPU);
      ASSERT_EQ(back.dtype(), d);
      for (int64_t i = 0; i < 1000; ++i) {
        ASSERT_EQ(back.to(DType::kF64).data<double>()[i], host.to(DType::kF64).data<double>()[i])
            << dtype_name(d) << " " << reduce_op_name(op) << " at " << i;
      }
    }
  }
}

TEST_F(NcclWorldOfOne, AsyncWorkOrdersLaterKernels) {
  Tensor dev = full({1 << 20}, 3.0, {.device = cuda(0)});
  auto work = nccl_->all_reduce_async(dev, ReduceOp::kSum);
  work->wait();  // the current stream now runs after the all-reduce
  EXPECT_EQ(dev.to(kCPU).data<float>()[(1 << 20) - 1], 3.0f);
  EXPECT_TRUE(work->is_completed());
}

TEST_F(NcclWorldOfOne, BroadcastAllGatherBarrier) {
  Tensor dev = arange(12.0).to(DType::kF32).view({3, 4}).to(cuda(0));
  nccl_->broadcast(dev, 0);
  const Tensor gathered = nccl_->all_gather(dev).to(kCPU);
  EXPECT_EQ(gathered.shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(gathered.data<float>()[11], 11.0f);
  nccl_->barrier();
}

// The watchdog (tests/dist/nccl_watchdog_test.cc drives its failures with a fake) must not fire on healthy
// work: a queue of collectives under a short timeout, each one well within it, then a barrier that waits
// for them on the host. The time printed says whether the queue as a whole outlasted the timeout.
TEST_F(NcclWorldOfOne, HealthyCollectivesRaiseNoTimeout) {
  Tensor dev = full({1 << 22}, 2.0, {.device = cuda(0)});
  nccl_->all_reduce(dev, ReduceOp::kSum);  // loads NCCL's kernels (CUDA loads modules lazily) outside the clock
  nccl_->barrier();
  auto group = make_nccl_process_group(*local_, cuda(0), {.timeout = std::chrono::milliseconds(100)});
  std::vector<std::unique_ptr<Work>> works;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) {
    works.push_back(group->all_reduce_async(dev, ReduceOp::kSum));
    group->broadcast(dev, 0);
  }
  group->barrier();
  const auto took = std::chrono::steady_clock::now() - start;
  for (auto& w : works) {
    EXPECT_TRUE(w->is_completed());
    w->wait();
  }
  EXPECT_EQ(dev.to(kCPU).data<float>()[(1 << 22) - 1], 2.0f);
  std::printf("400 collectives of 16 MiB and a barrier: %.1f ms (timeout 100 ms each)\n",
              std::chrono::duration<double, std::milli>(took).count());
}

// A group destroyed with collectives in flight lets them finish (the watchdog drains them with the
// timeout) before it destroys the communicator; the works it handed out stay usable.
TEST_F(NcclWorldOfOne, WorksOutliveTheirGroup) {
  Tensor dev = full({1 << 20}, 5.0, {.device = cuda(0)});
  std::vector<std::unique_ptr<Work>> works;
  for (int i = 0; i < 8; ++i) works.push_back(nccl_->all_reduce_async(dev, ReduceOp::kMax));
  nccl_.reset();
  for (auto& w : works) w->wait();
  EXPECT_EQ(dev.to(kCPU).data<float>()[7], 5.0f);
}

TEST_F(NcclWorldOfOne, ErrorsNameTheTensor) {
  EXPECT_THROW(nccl_->all_reduce(zeros({4})), Error);  // a CPU tensor
  Tensor dev = zeros({4, 4}, {.device = cuda(0)});
  EXPECT_THROW(nccl_->all_reduce(dev.t()), Error);  // not contiguous
  EXPECT_THROW(nccl_->broadcast(dev, 1), Error);    // no rank 1
}

}  // namespace
}  // namespace mantissa

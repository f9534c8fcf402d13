// The host-read observer and HostCopy on the CPU (their GPU side: tests/cuda/host_read_cuda_test.cc).
#include "framework/host_read.h"

#include <gtest/gtest.h>

#include <thread>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace mantissa {
namespace {

TEST(HostReadTest, ItemIsReportedToTheThreadsObserver) {
  std::vector<HostRead> seen;
  const Tensor t = scalar_tensor(2.5, {.dtype = DType::kF32});
  EXPECT_EQ(t.item(), 2.5);  // no observer: nothing to tell
  {
    ScopedHostReadObserver observe([&](HostRead r) { seen.push_back(r); });
    EXPECT_EQ(t.item(), 2.5);
    EXPECT_EQ(t.item<int>(), 2);
  }
  EXPECT_EQ(t.item(), 2.5);  // the guard is gone
  EXPECT_EQ(seen, (std::vector<HostRead>{HostRead::kItem, HostRead::kItem}));
}

TEST(HostReadTest, ObserversNestAndTheOuterOneComesBack) {
  int outer = 0, inner = 0;
  const Tensor t = scalar_tensor(1.0);
  ScopedHostReadObserver a([&](HostRead) { ++outer; });
  t.item();
  {
    ScopedHostReadObserver b([&](HostRead) { ++inner; });
    t.item();
    t.item();
  }
  t.item();
  EXPECT_EQ(outer, 2);
  EXPECT_EQ(inner, 2);
}

TEST(HostReadTest, ObserversArePerThread) {
  int here = 0;
  ScopedHostReadObserver observe([&](HostRead) { ++here; });
  std::thread other([] { scalar_tensor(3.0).item(); });
  other.join();
  EXPECT_EQ(here, 0);
}

TEST(HostReadTest, HostCopyOfACpuTensorIsASnapshot) {
  Tensor src = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  HostCopy copy(src.transpose(0, 1));  // a strided view: the copy is contiguous
  src.data<double>()[1] = 20;          // a later write does not show
  ASSERT_TRUE(copy.defined());
  EXPECT_TRUE(copy.ready());
  std::vector<HostRead> seen;
  ScopedHostReadObserver observe([&](HostRead r) { seen.push_back(r); });
  const Tensor& host = copy.wait();
  ASSERT_TRUE(host.is_contiguous());
  EXPECT_EQ(host.shape(), (Shape{2, 2}));
  const double* v = host.data<double>();
  EXPECT_EQ(std::vector<double>(v, v + 4), (std::vector<double>{1, 3, 2, 4}));
  EXPECT_EQ(seen, std::vector<HostRead>{HostRead::kHostCopyWait});
}

TEST(HostReadTest, HostCopyMovesAndAnEmptyOneSaysSo) {
  HostCopy a(scalar_tensor(7.0, {.dtype = DType::kF64}));
  HostCopy b = std::move(a);
  EXPECT_FALSE(a.defined());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(b.wait().data<double>()[0], 7.0);
  HostCopy c;
  c = std::move(b);
  EXPECT_EQ(c.wait().data<double>()[0], 7.0);
  HostCopy none;
  EXPECT_THROW(none.wait(), Error);
  EXPECT_THROW(HostCopy{Tensor()}, Error);
}

TEST(HostReadTest, NamesOfTheReads) {
  EXPECT_STREQ(host_read_name(HostRead::kItem), "item");
  EXPECT_STREQ(host_read_name(HostRead::kDeviceToHost), "device-to-host");
  EXPECT_STREQ(host_read_name(HostRead::kSynchronize), "synchronize");
  EXPECT_STREQ(host_read_name(HostRead::kHostCopyWait), "host-copy-wait");
}

}  // namespace
}  // namespace mantissa

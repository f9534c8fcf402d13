// The world-of-one ProcessGroup (what a build without MPI gets from init_process_group): collectives are
// identities, all_gather adds dim 0, and the argument checks every backend shares. The MPI backend is
// tested under mpirun by tests/dist/dist_main.cc.
#include <gtest/gtest.h>

#include "framework/dist/process_group.h"

namespace mantissa {
namespace {

TEST(LocalProcessGroup, CollectivesOverOneRank) {
  auto pg = make_local_process_group();
  EXPECT_EQ(pg->rank(), 0);
  EXPECT_EQ(pg->size(), 1);
  EXPECT_EQ(pg->local_rank(), 0);
  EXPECT_EQ(pg->backend(), "local");
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    const Tensor t = full({2, 3}, 1.5, {.dtype = dtype});
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) pg->all_reduce(t, op);
    auto work = pg->all_reduce_async(t);
    EXPECT_TRUE(work->is_completed());
    work->wait();
    EXPECT_EQ(t.to(DType::kF64).contiguous().data<double>()[5], 1.5) << dtype_name(dtype);
    pg->broadcast(t, 0);
    const Tensor all = pg->all_gather(t);
    EXPECT_EQ(all.shape(), (Shape{1, 2, 3}));
    EXPECT_EQ(all.dtype(), dtype);
    EXPECT_FALSE(all.shares_storage(t));  // a new tensor, as every rank's data is copied in a real world
  }
  pg->barrier();
}

TEST(LocalProcessGroup, ArgumentErrors) {
  auto pg = make_local_process_group();
  const Tensor m = zeros({3, 4});
  EXPECT_THROW(
      {
        try {
          pg->all_reduce(m.t());
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("all_reduce: expected a contiguous tensor, got [4, 3] f32"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  EXPECT_THROW(pg->all_reduce(zeros({2}, {.dtype = DType::kI64}), ReduceOp::kAvg), Error);
  EXPECT_THROW(pg->all_reduce(zeros({2}, {.dtype = DType::kI32})), Error);
  EXPECT_THROW(pg->broadcast(m, 1), Error);
  EXPECT_THROW(pg->all_gather(Tensor()), Error);
  pg->all_reduce(zeros({2}, {.dtype = DType::kI64}), ReduceOp::kMax);  // i64 sum and max are fine
}

}  // namespace
}  // namespace mantissa

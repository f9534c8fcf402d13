// The ProcessGroup tests, run on every rank under `mpirun -np N` (tests/dist/dist_test.sh): collectives
// in every dtype against closed forms, 16-bit sums rounded once, async all-reduces in flight together,
// argument errors, checked mode, DDP against one process (ddp_dist.cc), the loss scaler's agreed found_inf
// (scaler_dist.cc), the Trainer with an overflow on one rank (trainer_dist.cc) and BatchNorm's buffers
// and statistics across ranks (batchnorm_dist.cc). Other modes make a rank fail on purpose (die-exit,
// die-abort, die-throw, hang, mismatch); `bench` times all-reduce and `overlap` DDP's all-reduce against
// the backward it hides.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "framework/dist/process_group.h"
#include "framework/error.h"
#include "tests/dist/batchnorm_dist.h"
#include "tests/dist/ddp_dist.h"
#include "tests/dist/dist_bench.h"
#include "tests/dist/scaler_dist.h"
#include "tests/dist/trainer_dist.h"
#include "tests/dist/zero_dist.h"

namespace mantissa {
namespace {

int g_checks = 0;
int g_failures = 0;
int g_rank = 0;

void expect(bool ok, const char* expr, int line, const std::string& detail) {
  ++g_checks;
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "rank %d: FAILED line %d: %s %s\n", g_rank, line, expr, detail.c_str());
}
#define EXPECT(cond, ...) expect((cond), #cond, __LINE__, ::mantissa::detail::cat("" __VA_OPT__(, ) __VA_ARGS__))

std::vector<double> values(const Tensor& t) {
  const Tensor d = t.to(DType::kF64).contiguous();
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

// Runs `f` and returns the message of the mantissa::Error it throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
bool contains(const std::string& s, const char* piece) { return s.find(piece) != std::string::npos; }

// Rank r holds (r + 1) * (i % 5 + 1) / 4: small multiples of 1/4, exact in every dtype, so sums are exact
// and must match the closed form sum_r (r + 1) = n (n + 1) / 2 times (i % 5 + 1) / 4 exactly.
void test_sum_avg_max(ProcessGroup& pg) {
  const int n = pg.size();
  const int r = pg.rank();
  for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI64}) {
    for (int64_t numel : {7, 100003}) {  // the large one takes MPI's segmented algorithms
      const double scale = dtype == DType::kI64 ? 1.0 : 0.25;
      std::vector<double> mine(numel), sum(numel), max(numel);
      for (int64_t i = 0; i < numel; ++i) {
        mine[i] = (r + 1) * (i % 5 + 1) * scale;
        sum[i] = n * (n + 1) / 2 * (i % 5 + 1) * scale;
        max[i] = -1e9;
        for (int q = 0; q < n; ++q) max[i] = std::max(max[i], static_cast<double>((q * 7 + i) % 11 - 5));
      }
      Tensor t = from_vector(mine).to(dtype);
      pg.all_reduce(t, ReduceOp::kSum);
      EXPECT(values(t) == sum, dtype_name(dtype), " sum, numel ", numel);

      if (dtype != DType::kI64) {
        // avg divides the sum by n in f32 (f64 for f64) and rounds to the dtype once.
        Tensor a = from_vector(mine).to(dtype);
        pg.all_reduce(a, ReduceOp::kAvg);
        std::vector<double> avg(numel);
        for (int64_t i = 0; i < numel; ++i) {
          avg[i] = dtype == DType::kF64 ? sum[i] / n : static_cast<double>(static_cast<float>(sum[i]) / n);
        }
        EXPECT(values(a) == values(from_vector(avg).to(dtype)), dtype_name(dtype), " avg, numel ", numel);
      }

      std::vector<double> m(numel);
      for (int64_t i = 0; i < numel; ++i) m[i] = (r * 7 + i) % 11 - 5;
      Tensor mx = from_vector(m).to(dtype);
      pg.all_reduce(mx, ReduceOp::kMax);
      EXPECT(values(mx) == max, dtype_name(dtype), " max, numel ", numel);
    }
  }
}

// 16-bit sums are taken in f32 and rounded once. Rank r's values are k / 256 with |k| small enough that
// they are exact in the dtype and their f32 sum over <= 3 ranks is exact, so the expected result is the
// dtype's rounding of the exact sum. With 3 ranks, summing in the 16-bit dtype hop by hop would differ
// (two values already round: their sum needs a bit more than the dtype has).
void test_low_precision_rounding(ProcessGroup& pg) {
  const int n = pg.size();
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const int64_t range = dtype == DType::kF16 ? 2047 : 255;  // 11 and 8 significant bits
    const int64_t numel = 4096;
    auto value = [&](int q, int64_t i) {
      const uint64_t h = (static_cast<uint64_t>(q) * 1000003u + static_cast<uint64_t>(i)) * 2654435761u;
      return static_cast<double>(static_cast<int64_t>(h % (2 * range + 1)) - range) / 256.0;
    };
    std::vector<double> mine(numel), exact(numel), hop(numel);
    for (int64_t i = 0; i < numel; ++i) {
      mine[i] = value(pg.rank(), i);
      for (int q = 0; q < n; ++q) exact[i] += value(q, i);
    }
    const std::vector<double> once = values(from_vector(exact).to(dtype));
    int64_t differ = 0;  // elements where summing hop by hop in 16 bits gives another result
    for (int64_t i = 0; i < numel; ++i) {
      double h = values(from_vector(std::vector<double>{value(0, i)}).to(dtype))[0];
      for (int q = 1; q < n; ++q) h = values(from_vector(std::vector<double>{h + value(q, i)}).to(dtype))[0];
      differ += h != once[i];
    }
    Tensor t = from_vector(mine).to(dtype);
    pg.all_reduce(t, ReduceOp::kSum);
    EXPECT(values(t) == once, dtype_name(dtype), " sum rounded once");
    if (n >= 3) EXPECT(differ > 0, "the data must tell rounding once from rounding per hop, ", dtype_name(dtype));

    // 2048 (f16) or 256 (bf16) plus 1 from every other rank: the spacing there is 2, so adding the ones
    // one at a time in 16 bits rounds each back (ties to even), while the f32 sum keeps them.
    const double big = dtype == DType::kF16 ? 2048 : 256;
    Tensor b = from_vector(std::vector<double>{pg.rank() == 0 ? big : 1.0}).to(dtype);
    pg.all_reduce(b, ReduceOp::kSum);
    EXPECT(values(b)[0] == values(from_vector(std::vector<double>{big + n - 1}).to(dtype))[0], dtype_name(dtype), " ",
           big, " + ones gave ", values(b)[0]);
  }
}

// Sums of arbitrary f32 values depend on the order of additions; DDP needs every rank to get the same bits.
void test_identical_on_all_ranks(ProcessGroup& pg) {
  const int64_t numel = 262147;
  std::vector<float> mine(numel);
  for (int64_t i = 0; i < numel; ++i) mine[i] = std::sin(static_cast<float>(i * (pg.rank() + 3))) * 1e3f;
  Tensor t = from_vector(mine);
  pg.all_reduce(t, ReduceOp::kSum);
  const Tensor all = pg.all_gather(t);
  for (int q = 1; q < pg.size(); ++q) {
    EXPECT(std::memcmp(all.select(0, q).data_ptr(), all.select(0, 0).data_ptr(), t.nbytes()) == 0, "rank ", q,
           " got other bits than rank 0");
  }
}

void test_broadcast_gather_barrier(ProcessGroup& pg) {
  const int n = pg.size();
  const int root = std::min(1, n - 1);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kI64, DType::kBool}) {
    Tensor t = full({3, 2}, pg.rank() == root ? 1.0 : 0.0, {.dtype = dtype});
    pg.broadcast(t, root);
    EXPECT(values(t) == std::vector<double>(6, 1.0), dtype_name(dtype), " broadcast from root ", root);
  }
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kI64}) {
    Tensor t = full({2, 3}, 10.0 * pg.rank(), {.dtype = dtype});
    const Tensor all = pg.all_gather(t);
    EXPECT(all.shape() == (Shape{n, 2, 3}) && all.dtype() == dtype, shape_str(all.shape()));
    for (int q = 0; q < n; ++q) {
      EXPECT(values(all.select(0, q)) == std::vector<double>(6, 10.0 * q), dtype_name(dtype), " row ", q);
    }
  }
  // Rank 0 arrives 300 ms late: no other rank may leave the barrier before it enters.
  const auto start = std::chrono::steady_clock::now();
  if (pg.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  pg.barrier();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT(waited >= 0.29, "left the barrier after ", waited, " s");
}

// DDP starts one all-reduce per bucket during backward and waits for them all before the step: several in
// flight at once, computation in between, waits in any order.
void test_async(ProcessGroup& pg) {
  const int n = pg.size();
  std::vector<Tensor> buckets;
  std::vector<std::unique_ptr<Work>> works;
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kF64};
  for (int b = 0; b < 3; ++b) {
    buckets.push_back(full({1 << 18}, (pg.rank() + 1) * (b + 1), {.dtype = dtypes[b]}));
    works.push_back(pg.all_reduce_async(buckets.back(), b == 1 ? ReduceOp::kAvg : ReduceOp::kSum));
  }
  double acc = 0;  // computation overlapping the transfers, polling them as DDP's backward would
  for (int step = 0; step < 200; ++step) {
    for (int i = 0; i < 20000; ++i) acc += std::sqrt(static_cast<double>(i + step));
    for (auto& w : works) w->is_completed();
  }
  EXPECT(acc > 0, "");
  for (int b = 2; b >= 0; --b) works[b]->wait();
  EXPECT(works[0]->is_completed() && works[2]->is_completed(), "after wait()");
  const double total = n * (n + 1) / 2.0;
  EXPECT(values(buckets[0]) == std::vector<double>(1 << 18, total), "bucket 0");
  EXPECT(values(buckets[1]) == std::vector<double>(1 << 18, total * 2 / n), "bucket 1 (avg)");
  EXPECT(values(buckets[2]) == std::vector<double>(1 << 18, total * 3), "bucket 2");
  // A Work dropped without wait() completes in its destructor: the collective still matches on all ranks.
  Tensor dropped = full({5}, 1.0);
  pg.all_reduce_async(dropped, ReduceOp::kSum).reset();
  EXPECT(values(dropped) == std::vector<double>(5, n), "dropped work");
}

void test_errors(ProcessGroup& pg) {
  const Tensor m = zeros({3, 4});
  std::string e = error_of([&] { pg.all_reduce(m.t()); });
  EXPECT(contains(e, "all_reduce: expected a contiguous tensor") && contains(e, "[4, 3]"), e);
  e = error_of([&] { pg.all_reduce(zeros({2}, {.dtype = DType::kI64}), ReduceOp::kAvg); });
  EXPECT(contains(e, "avg of an i64 tensor"), e);
  e = error_of([&] { pg.all_reduce(zeros({2}, {.dtype = DType::kBool})); });
  EXPECT(contains(e, "dtype bool cannot be reduced"), e);
  e = error_of([&] { pg.broadcast(m, pg.size()); });
  EXPECT(contains(e, "broadcast: root") && contains(e, "is not a rank"), e);
  e = error_of([&] { pg.all_gather(Tensor()); });
  EXPECT(contains(e, "all_gather: the tensor is undefined"), e);
  // MPI runs MPI_THREAD_FUNNELED: collectives from another thread are refused before MPI sees them.
  std::thread([&] { e = error_of([&] { pg.barrier(); }); }).join();
  EXPECT(contains(e, "barrier: called from a thread other than the one that initialized MPI"), e);

  // Checked mode: mismatches throw the same message on every rank and leave the group usable.
  auto checked = init_process_group({.check = CollectiveCheck::kShapes});
  if (pg.size() > 1) {
    e = error_of([&] { checked->all_reduce(zeros({4 + pg.rank(), 2})); });
    EXPECT(contains(e, "the ranks disagree") && contains(e, "rank 0 of") &&
               contains(e, "all_reduce(sum) of [4, 2] f32") && contains(e, "all_reduce(sum) of [5, 2] f32"),
           e);
    e = error_of([&] {
      if (pg.rank() == 0)
        checked->broadcast(zeros({3}), 0);
      else
        checked->all_reduce(zeros({3}, {.dtype = DType::kF16}), ReduceOp::kMax);
    });
    EXPECT(contains(e, "broadcast(root 0) of [3] f32") && contains(e, "all_reduce(max) of [3] f16"), e);
  }
  Tensor ok = ones({3});
  checked->all_reduce(ok);
  EXPECT(values(ok) == std::vector<double>(3, pg.size()), "checked group after a mismatch");
}

// The example in framework/dist/process_group.h, verbatim but for the expected value on n ranks.
void test_header_example() {
  auto pg = init_process_group();  // under `mpirun -np 2 prog`: rank 0 and rank 1
  Tensor g = full({4}, pg->rank() + 1.0);
  auto work = pg->all_reduce_async(g, ReduceOp::kAvg);
  work->wait();  // g is [1.5, 1.5, 1.5, 1.5] on both ranks
  EXPECT(values(g) == std::vector<double>(4, (pg->size() + 1) / 2.0), "header example");
}

void test_world(ProcessGroup& pg) {
  EXPECT(pg.backend() == "mpi", pg.backend());
  if (const char* size = std::getenv("OMPI_COMM_WORLD_SIZE")) EXPECT(pg.size() == std::atoi(size), size);
  EXPECT(pg.rank() >= 0 && pg.rank() < pg.size(), pg.rank());
  EXPECT(pg.local_rank() == pg.rank(), "one machine: local rank ", pg.local_rank());  // all on one host
  auto local = make_local_process_group();
  Tensor t = full({2}, 3.0);
  local->all_reduce(t, ReduceOp::kAvg);
  EXPECT(values(t) == std::vector<double>(2, 3.0) && local->all_gather(t).shape() == (Shape{1, 2}), "local");
}

// A rank that fails in the middle of the job; the others wait in an all-reduce (timeout 60 s). mpirun must
// end the job quickly with a non-zero status (dist_test.sh times it). "mismatch": the ranks broadcast
// tensors of different sizes; MPI's error must come back as a mantissa::Error.
int fail_on_purpose(const std::string& mode) {
  const bool hang = mode == "hang";
  auto pg = init_process_group({.timeout = std::chrono::milliseconds(hang ? 2000 : 60000)});
  g_rank = pg->rank();
  Tensor t = ones({16});
  pg->all_reduce(t);
  if (pg->rank() == pg->size() - 1) {
    std::fprintf(stderr, "rank %d: failing on purpose (%s)\n", pg->rank(), mode.c_str());
    if (mode == "die-exit") std::exit(1);
    if (mode == "die-abort") std::abort();
    if (mode == "die-throw") throw Error("a mantissa::Error on the last rank, on purpose");
    if (hang) std::this_thread::sleep_for(std::chrono::seconds(120));
  }
  if (mode == "mismatch") {  // without CollectiveCheck: MPI itself finds the last rank's buffer too small
    Tensor b = zeros({pg->rank() == pg->size() - 1 ? 4 : 8});
    pg->broadcast(b, 0);
  }
  pg->all_reduce(t);
  return 0;
}

}  // namespace
}  // namespace mantissa

int main(int argc, char** argv) {
  using namespace mantissa;
  const std::string mode = argc > 1 ? argv[1] : "all";
  try {
    if (mode == "bench") return run_allreduce_bench();
    if (mode == "overlap") return run_overlap_bench();
    if (mode != "all") return fail_on_purpose(mode);
    auto pg = init_process_group();
    g_rank = pg->rank();
    test_world(*pg);
    test_sum_avg_max(*pg);
    test_low_precision_rounding(*pg);
    test_identical_on_all_ranks(*pg);
    test_broadcast_gather_barrier(*pg);
    test_async(*pg);
    test_errors(*pg);
    test_header_example();
    g_failures += run_ddp_checks(*pg, g_checks);
    g_failures += run_scaler_checks(*pg, g_checks);
    g_failures += run_trainer_checks(*pg, g_checks);
    g_failures += run_batchnorm_checks(*pg, g_checks);
    g_failures += run_zero_checks(*pg, g_checks);
    Tensor failures = full({1}, g_failures, {.dtype = DType::kI64});
    pg->all_reduce(failures);
    if (pg->rank() == 0) {
      std::printf("dist tests: %d ranks, %d checks per rank, %lld failures in all\n", pg->size(), g_checks,
                  static_cast<long long>(failures.item()));
    }
    return failures.item() == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", g_rank, e.what());
    return 1;
  }
}

// How much of DDP's all-reduce the backward hides, on CPU ranks: per model and bucket cap, the median per
// step (the slowest rank's) of the backward alone (inside no_sync), the backward with DDP's hooks (bucket
// copies, launches, MPI progress polls), the wait in finish(), exposed = backward with DDP + finish -
// backward alone (what data parallelism adds to a step), and the all-reduce of the same buckets alone
// (blocking, one after another); hidden = all-reduce alone - exposed, the part of the transfer that ran
// under the backward. Rank 0 prints a markdown table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/dist/process_group.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "ops/loss/loss.h"
#include "tests/dist/dist_bench.h"
#include "train/ddp.h"

namespace mantissa {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// The slowest rank's median of `samples` (a step is done when the last rank is).
double slowest_median(ProcessGroup& pg, std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  Tensor m = full({1}, samples[samples.size() / 2], {.dtype = DType::kF64});
  pg.all_reduce(m, ReduceOp::kMax);
  return m.item();
}

struct Case {
  std::string name;
  Module* model;
  std::function<Tensor()> loss;  // forward of this rank's batch
};

void measure(ProcessGroup& pg, const Case& c, double cap_mb, int steps) {
  DistributedDataParallel ddp(*c.model, pg, {.bucket_cap_mb = cap_mb});
  const auto buckets = ddp.bucket_names();
  // The buckets' element counts, for the all-reduce alone.
  std::vector<int64_t> bucket_numel;
  const auto params = c.model->named_parameters();
  int64_t total = 0;
  for (const auto& names : buckets) {
    int64_t n = 0;
    for (const auto& name : names)
      for (const auto& p : params)
        if (p.name == name) n += p.tensor.numel();
    bucket_numel.push_back(n);
    total += n;
  }
  std::vector<Tensor> flats;
  for (int64_t n : bucket_numel) flats.push_back(full({n}, 1.0));

  std::vector<double> fwd, bwd_local, bwd_ddp, wait, alone;
  for (int s = 0; s < steps + 2; ++s) {  // 2 warm-up steps
    c.model->zero_grad();
    Tensor loss = c.loss();
    {
      auto local = ddp.no_sync();
      pg.barrier();
      const auto t = Clock::now();
      loss.backward();
      if (s >= 2) bwd_local.push_back(ms_since(t));
    }
    c.model->zero_grad();
    pg.barrier();
    auto t = Clock::now();
    loss = c.loss();
    if (s >= 2) fwd.push_back(ms_since(t));
    t = Clock::now();
    loss.backward();
    if (s >= 2) bwd_ddp.push_back(ms_since(t));
    t = Clock::now();
    ddp.finish();
    if (s >= 2) wait.push_back(ms_since(t));
    pg.barrier();
    t = Clock::now();
    for (Tensor& f : flats) pg.all_reduce(f, ReduceOp::kSum);
    if (s >= 2) alone.push_back(ms_since(t));
  }
  const double f = slowest_median(pg, fwd), bl = slowest_median(pg, bwd_local), bd = slowest_median(pg, bwd_ddp),
               w = slowest_median(pg, wait), a = slowest_median(pg, alone);
  const double exposed = bd + w - bl;  // what data parallelism adds to the step
  const double hidden = std::max(0.0, a - exposed);
  if (pg.rank() == 0) {
    std::printf("| %s | %.2f M | %g MiB | %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f (%.0f%%) |\n",
                c.name.c_str(), static_cast<double>(total) / 1e6, cap_mb, buckets.size(), f, bl, bd, w, exposed, a,
                hidden, a > 0 ? 100.0 * hidden / a : 0.0);
  }
}

}  // namespace

int run_overlap_bench() {
  auto pg = init_process_group();
  const int r = pg->rank();
  if (r == 0) {
    std::printf(
        "%d ranks, f32; medians in ms per step (the slowest rank's)\n\n"
        "| model | params | bucket cap | buckets | forward | backward alone | backward with DDP | "
        "finish() wait | exposed | all-reduce alone | hidden under backward |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n",
        pg->size());
  }
  Generator g(1), gdata(100 + static_cast<uint64_t>(r));
  // mantissa-train's MLP (784-1024-1024-10), batch 128 per rank.
  MLP mlp(784, {1024, 1024}, 10, {.generator = &g});
  const Tensor x = randn({128, 784}, {}, &gdata);
  std::vector<int64_t> labels(128);
  for (int64_t& y : labels) y = static_cast<int64_t>(gdata.next_u32() % 10);
  const Tensor y = from_vector(labels, {128});
  const Case mlp_case{"MLP", &mlp, [&] { return cross_entropy(mlp.forward(x), y); }};
  // mantissa-train's GPT (4 layers, 128 wide, context 128), batch 8 per rank.
  GPT gpt(GPTConfig{}, {.generator = &g});
  std::vector<int64_t> ids(8 * 129);
  for (int64_t& id : ids) id = static_cast<int64_t>(gdata.next_u32() % 65);
  const Tensor tokens = from_vector(ids, {8, 129});
  const Tensor idx = tokens.narrow(1, 0, 128).contiguous(), next = tokens.narrow(1, 1, 128).contiguous();
  const Case gpt_case{"GPT", &gpt, [&] { return gpt.forward(idx, next).loss; }};
  for (const Case* c : {&mlp_case, &gpt_case}) {
    for (double cap : {25.0, 1.0}) measure(*pg, *c, cap, 20);
  }
  return 0;
}

}  // namespace mantissa

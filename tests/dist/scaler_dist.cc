// GradScaler with a process group on N ranks: an overflow injected on the last rank only, after DDP has
// averaged the grads (so DDP cannot spread it: only the scaler's MAX all-reduce can), must make every rank
// skip that step and back off to the same scale, on the unscale_ path and on the fused step path; the
// replicas must end bit-identical. Without the group the ranks disagree (the check has teeth).
#include "tests/dist/scaler_dist.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"
#include "tests/dist/checker.h"
#include "train/ddp.h"

namespace mantissa {
namespace {

constexpr int64_t kIn = 8, kOut = 2, kB = 4, kSteps = 12;
constexpr int64_t kOverflowSteps[] = {4, 7};  // 4: unscale_ then step; 7: the fused step (odd steps)

bool is_overflow_step(int64_t s) { return s == kOverflowSteps[0] || s == kOverflowSteps[1]; }

// The first element of the first parameter's grad set to inf, on this rank only.
void inject_inf(MLP& model) {
  const Tensor g = model.named_parameters().front().tensor.grad();
  g.data<float>()[0] = INFINITY;
}

// One step of DDP + scaler: even steps unscale_ explicitly, odd ones take the fused step. Returns applied.
bool train_step(MLP& model, DistributedDataParallel& ddp, Adam& opt, amp::GradScaler& scaler, const Tensor& x,
                const Tensor& y, int64_t s, bool inject) {
  opt.zero_grad();
  scaler.scale(mse_loss(model.forward(x), y)).backward();
  ddp.finish();
  if (inject) inject_inf(model);
  if (s % 2 == 0) scaler.unscale_(opt);
  const bool applied = scaler.step(opt);
  scaler.update();
  return applied;
}

}  // namespace

int run_scaler_checks(ProcessGroup& pg, int& checks) {
  const int n = pg.size(), r = pg.rank();
  const bool injector = r == n - 1;
  DistChecker c{.rank = r, .suite = "scaler"};
  Generator gdata(21 + static_cast<uint64_t>(r));  // each rank its own shard
  const Tensor x = randn({kSteps, kB, kIn}, {}, &gdata), y = randn({kSteps, kB, kOut}, {}, &gdata);

  Generator ginit(3);
  MLP model(kIn, {16}, kOut, {.generator = &ginit});
  DistributedDataParallel ddp(model, pg);
  Adam opt(model.named_parameters(), {.lr = 1e-2});
  // growth_interval 3 so that the scale also grows in the run: 1024 -> 2048 after steps 0-2, backoff to
  // 1024 at step 4, 512 at step 7, growth to 1024 after steps 8-10.
  amp::GradScaler scaler({.init_scale = 1024, .growth_interval = 3, .process_group = &pg});
  std::vector<double> applied, scales;
  for (int64_t s = 0; s < kSteps; ++s) {
    const bool inject = injector && is_overflow_step(s);
    applied.push_back(train_step(model, ddp, opt, scaler, x.select(0, s), y.select(0, s), s, inject) ? 1 : 0);
    scales.push_back(scaler.get_scale());
  }
  for (int64_t s = 0; s < kSteps; ++s) {
    c.expect(applied[s] == (is_overflow_step(s) ? 0 : 1),
             detail::cat("step ", s, (applied[s] ? " applied" : " skipped"), " on rank ", r));
  }
  c.expect(scaler.stats().skipped_steps == 2, detail::cat("skipped steps ", scaler.stats().skipped_steps));
  c.expect(scaler.get_scale() == 1024, detail::cat("final scale ", scaler.get_scale(), ", expected 1024"));
  // Every rank: the same scale after every step, and the same weights and Adam moments bit for bit.
  const Tensor all_scales = pg.all_gather(from_vector(scales));
  for (int q = 1; q < n; ++q) {
    const Tensor mine = all_scales.select(0, q), first = all_scales.select(0, 0);
    c.expect(std::memcmp(mine.data_ptr(), first.data_ptr(), first.nbytes()) == 0,
             detail::cat("rank ", q, "'s scale history differs from rank 0's"));
  }
  for (const NamedTensor& p : model.named_parameters()) {
    const Tensor all = pg.all_gather(p.tensor.detach());
    for (int q = 1; q < n; ++q) {
      c.expect(std::memcmp(all.select(0, q).data_ptr(), all.select(0, 0).data_ptr(), p.tensor.nbytes()) == 0,
               detail::cat(p.name, ": rank ", q, " holds other weights than rank 0"));
    }
  }

  // The control: the same injection with a scaler that decides alone. The injecting rank skips, the others
  // apply the step, so the replicas would drift apart; the group is what keeps them together.
  if (n > 1) {
    amp::GradScaler alone({.init_scale = 1024});
    const bool step_applied = train_step(model, ddp, opt, alone, x.select(0, 0), y.select(0, 0), 1, injector);
    const Tensor flags = pg.all_gather(full({1}, step_applied ? 1.0 : 0.0));
    c.expect(flags.select(0, 0).item() == 1.0 && flags.select(0, n - 1).item() == 0.0,
             "without the process group rank 0 applies and the injecting rank skips");
  }

  if (r == 0) {
    std::printf(
        "scaler: %d ranks, overflow injected on rank %d at steps 4 and 7: skipped on every rank, final "
        "scale %g on every rank, identical weights\n",
        n, n - 1, scaler.get_scale());
  }
  checks += c.checks;
  return c.failures;
}

}  // namespace mantissa

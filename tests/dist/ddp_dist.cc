// DistributedDataParallel on N ranks (tests/dist/dist_test.sh runs 1, 2 and 3): rank r trains an MLP with
// SGD on rows r*B..r*B+B-1 of each global batch of N*B rows; every rank also runs the same 20 steps in
// one process with the whole batch. The losses averaged over the ranks and the final weights must match
// that run within float32 tolerance, and all ranks must hold identical weights bit for bit.
#include "tests/dist/ddp_dist.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "framework/generator.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "ops/loss/loss.h"
#include "optim/sgd.h"
#include "tests/dist/checker.h"
#include "train/ddp.h"

namespace mantissa {
namespace {

constexpr int64_t kIn = 10, kOut = 3, kB = 4, kSteps = 20;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  double m = 0;
  for (int64_t i = 0; i < ca.numel(); ++i) {
    m = std::max(m, static_cast<double>(std::fabs(ca.data<float>()[i] - cb.data<float>()[i])));
  }
  return m;
}

}  // namespace

int run_ddp_checks(ProcessGroup& pg, int& checks) {
  const int n = pg.size(), r = pg.rank();
  DistChecker c{.rank = r, .suite = "ddp"};
  // The dataset: kSteps global batches of n*kB rows, the same on every rank (one seed).
  Generator gdata(11);
  const Tensor x = randn({kSteps * n * kB, kIn}, {}, &gdata), y = randn({kSteps * n * kB, kOut}, {}, &gdata);

  // Ranks > 0 start from other weights: DDP must broadcast rank 0's.
  Generator gref(5), gmine(5 + static_cast<uint64_t>(r));
  MLP ref(kIn, {16, 16}, kOut, {.generator = &gref});
  MLP model(kIn, {16, 16}, kOut, {.generator = &gmine});
  // 1 KiB (256 floats) buckets: {layers.4.*, layers.2.bias}, {layers.2.weight}, {layers.0.*}, 3 all-reduces.
  DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 1.0 / 1024});
  c.expect(ddp.bucket_names().size() >= 3, "at least 3 buckets");
  const SGDOptions sgd{.lr = 0.05, .momentum = 0.9};
  SGD opt_ref(ref.named_parameters(), sgd), opt(model.named_parameters(), sgd);

  double worst_loss = 0;
  for (int64_t s = 0; s < kSteps; ++s) {
    const int64_t base = s * n * kB;
    Tensor loss_ref = mse_loss(ref.forward(x.narrow(0, base, n * kB)), y.narrow(0, base, n * kB));
    loss_ref.backward();
    opt_ref.step();
    opt_ref.zero_grad();

    Tensor l = mse_loss(model.forward(x.narrow(0, base + r * kB, kB)), y.narrow(0, base + r * kB, kB));
    l.backward();
    ddp.finish();
    opt.step();
    opt.zero_grad();
    Tensor mean = full({1}, l.item());
    pg.all_reduce(mean, ReduceOp::kAvg);  // the loss a one-process run would log
    // Per-row losses are summed in another order (and divided by kB then n, not by n*kB), and the weights
    // carry the last-bit differences below, so the mean differs from the reference by about one f32 ulp
    // (measured: 1.0e-7 relative on 2 ranks, 1.1e-7 on 3). 1e-6 relative (~8 ulps) leaves headroom for
    // other compilers' rounding; a missing average or a wrong shard changes the loss by 1e-2 or more.
    // In a world of one the computation is the reference's exactly.
    const double diff = std::fabs(mean.item() - loss_ref.item());
    const double tol = n == 1 ? 0.0 : 1e-6 * std::fabs(loss_ref.item());
    worst_loss = std::max(worst_loss, diff / std::fabs(loss_ref.item()));
    c.expect(diff <= tol, detail::cat("step ", s, " loss ", mean.item(), " vs ", loss_ref.item()));
  }

  // The final weights: every gradient element is a sum over n*kB rows in another order than the reference
  // (per rank, then /n and the all-reduce), a relative error of a few f32 ulps (1.2e-7) per step; 20 steps
  // of SGD with momentum 0.9 carry it along, and the weights are O(0.3), whose ulp is 3e-8. Measured: 3.0e-8
  // (2 ranks) and 6.0e-8 (3 ranks), i.e. 1-2 ulps. 1e-6 absolute (~30 ulps) is headroom for rounding only:
  // not dividing by the world size, or a wrong shard, moves weights by 1e-3 or more. Exact for one rank.
  double worst_w = 0;
  const auto pr = ref.named_parameters(), pm = model.named_parameters();
  for (size_t i = 0; i < pr.size(); ++i) {
    const double d = max_abs_diff(pr[i].tensor, pm[i].tensor);
    worst_w = std::max(worst_w, d);
    c.expect(n == 1 ? d == 0 : d <= 1e-6, detail::cat(pm[i].name, " differs from one process by ", d));
    const Tensor all = pg.all_gather(pm[i].tensor.detach());
    for (int q = 1; q < n; ++q) {
      c.expect(std::memcmp(all.select(0, q).data_ptr(), all.select(0, 0).data_ptr(), pm[i].tensor.nbytes()) == 0,
               detail::cat(pm[i].name, ": rank ", q, " holds other bits than rank 0"));
    }
  }
  // Gradient accumulation: two micro-batches per rank, the first under no_sync(); the grads after finish()
  // must be the one-process grads of both global micro-batches (same rounding argument and tolerance as the
  // weights above, on gradients of O(0.1..1)), and the same bits on every rank.
  for (int64_t micro = 0; micro < 2; ++micro) {
    const int64_t base = micro * n * kB;
    mse_loss(ref.forward(x.narrow(0, base, n * kB)), y.narrow(0, base, n * kB)).backward();
    if (micro == 0) {
      auto guard = ddp.no_sync();
      mse_loss(model.forward(x.narrow(0, base + r * kB, kB)), y.narrow(0, base + r * kB, kB)).backward();
    } else {
      mse_loss(model.forward(x.narrow(0, base + r * kB, kB)), y.narrow(0, base + r * kB, kB)).backward();
    }
  }
  ddp.finish();
  double worst_g = 0;
  for (size_t i = 0; i < pr.size(); ++i) {
    const double d = max_abs_diff(pr[i].tensor.grad(), pm[i].tensor.grad());
    worst_g = std::max(worst_g, d);
    c.expect(n == 1 ? d == 0 : d <= 1e-6, detail::cat("no_sync: grad of ", pm[i].name, " differs by ", d));
    const Tensor all = pg.all_gather(pm[i].tensor.grad());
    for (int q = 1; q < n; ++q) {
      const Tensor mine = all.select(0, q), first = all.select(0, 0);
      c.expect(std::memcmp(mine.data_ptr(), first.data_ptr(), first.nbytes()) == 0,
               detail::cat("no_sync: grad of ", pm[i].name, ": rank ", q, " holds other bits than rank 0"));
    }
  }

  if (r == 0) {
    std::printf(
        "ddp: %d ranks x batch %lld vs 1 x %lld, %lld SGD steps: worst loss rel. diff %.3g, worst "
        "weight abs. diff %.3g; no_sync grads abs. diff %.3g\n",
        n, static_cast<long long>(kB), static_cast<long long>(n * kB), static_cast<long long>(kSteps), worst_loss,
        worst_w, worst_g);
  }
  checks += c.checks;
  return c.failures;
}

}  // namespace mantissa

// BatchNorm under data parallelism on N ranks (tests/dist/dist_test.sh runs 1, 2 and 3), each rank
// training on data of its own: DistributedDataParallel::sync_buffers() gives every rank rank 0's running
// statistics (BroadcastBuffers::kYes) or leaves each rank its own (kNo), and the Trainer calls it before
// every step and every evaluation. A synchronized BatchNorm2d (models/layers/sync_batch_norm.h) on N ranks
// gives one process's outputs, gradients and running statistics for the global batch.
#include "tests/dist/batchnorm_dist.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "models/cnn.h"
#include "models/layers/activation.h"
#include "models/layers/conv.h"
#include "models/layers/flatten.h"
#include "models/layers/linear.h"
#include "models/layers/norm.h"
#include "models/layers/sequential.h"
#include "models/layers/sync_batch_norm.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "optim/sgd.h"
#include "tests/dist/checker.h"
#include "train/ddp.h"
#include "train/trainer.h"

namespace mantissa {
namespace {

constexpr int64_t kSteps = 5, kB = 4;

// [N, 1, 6, 6] -> conv 3x3 -> [N, 3, 4, 4] -> BatchNorm2d -> relu -> [N, 48] -> 2 outputs. Its buffers:
// 1.running_mean, 1.running_var (f32 [3]) and 1.num_batches_tracked (i64 0-d).
std::shared_ptr<Sequential> small_bn_net(uint64_t seed) {
  Generator g(seed);
  return std::make_shared<Sequential>(
      std::make_shared<Conv2d>(1, 3, std::array<int64_t, 2>{3, 3}, Conv2dLayerOptions{.generator = &g}),
      std::make_shared<BatchNorm2d>(3), std::make_shared<ReLU>(), std::make_shared<Flatten>(),
      std::make_shared<Linear>(48, 2, LinearOptions{.generator = &g}));
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// Whether every rank's buffers hold rank 0's bits (`gathered`: all_gather of each buffer, in order).
bool all_ranks_hold_rank0s(const std::vector<Tensor>& gathered, int n) {
  for (const Tensor& all : gathered) {
    for (int q = 1; q < n; ++q) {
      if (!same_bits(all.select(0, q).contiguous(), all.select(0, 0).contiguous())) return false;
    }
  }
  return true;
}

std::vector<Tensor> gather_buffers(ProcessGroup& pg, const Module& m) {
  std::vector<Tensor> out;
  for (const NamedTensor& b : m.named_buffers()) out.push_back(pg.all_gather(b.tensor.contiguous()));
  return out;
}

// kSteps SGD steps on rank-specific data, sync_buffers() before each forward. With kYes every rank must
// hold rank 0's buffers (its values before the call) right after each call; with kNo the call must change
// nothing, and the ranks' running statistics must have drifted apart.
void check_sync_buffers(ProcessGroup& pg, DistChecker& c, BroadcastBuffers mode) {
  const int n = pg.size(), r = pg.rank();
  const char* name = mode == BroadcastBuffers::kYes ? "kYes" : "kNo";
  auto net = small_bn_net(3 + static_cast<uint64_t>(r));  // other initial weights: the constructor broadcasts
  DistributedDataParallel ddp(*net, pg, {.broadcast_buffers = mode});
  SGD sgd(net->named_parameters(), {.lr = 0.1});
  Generator gdata(100 + static_cast<uint64_t>(r));  // each rank its own data
  for (int64_t s = 0; s < kSteps; ++s) {
    const std::vector<Tensor> before = gather_buffers(pg, *net);
    std::vector<Tensor> mine_before;
    for (const NamedTensor& b : net->named_buffers()) mine_before.push_back(b.tensor.clone());
    ddp.sync_buffers();
    const std::vector<NamedTensor> buffers = net->named_buffers();
    for (size_t i = 0; i < buffers.size(); ++i) {
      const Tensor& want = mode == BroadcastBuffers::kYes ? before[i].select(0, 0).contiguous() : mine_before[i];
      c.expect(same_bits(buffers[i].tensor.contiguous(), want),
               detail::cat(name, " step ", s, ": after sync_buffers() ", buffers[i].name, " holds other bits than ",
                           mode == BroadcastBuffers::kYes ? "rank 0's" : "before"));
    }
    // The ranks' statistics differ before the call from the second step on (each updated its own).
    if (n > 1 && s > 0) c.expect(!all_ranks_hold_rank0s(before, n), detail::cat(name, " step ", s, ": no drift"));
    Tensor x = empty({kB, 1, 6, 6});
    normal_(x, 0.5 * (r + 1), 1.0, &gdata);  // another mean per rank: the running means must differ
    const Tensor y = randn({kB, 2}, {}, &gdata);
    mse_loss(net->forward(x), y).backward();
    ddp.finish();
    sgd.step();
    sgd.zero_grad();
  }
  const bool same = all_ranks_hold_rank0s(gather_buffers(pg, *net), n);
  if (mode == BroadcastBuffers::kYes) {
    ddp.sync_buffers();
    c.expect(all_ranks_hold_rank0s(gather_buffers(pg, *net), n), "kYes: buffers differ after the last sync");
  } else if (n > 1) {
    c.expect(!same, "kNo: the ranks' buffers are identical after training on different data");
  }
}

// Buffers of every dtype, one of them a transposed view, with other values on every rank: after
// sync_buffers() each holds rank 0's bits (the broadcast packs them all into one f64 tensor).
void check_every_dtype(ProcessGroup& pg, DistChecker& c) {
  const int n = pg.size(), r = pg.rank();
  Module m;
  const double k = r + 1;
  // Values that need every bit of their dtype: 1/3 rounded, and integers near 2^53 and 2^31.
  m.register_buffer("f32", full({3}, k / 3.0));
  m.register_buffer("f64", full({2}, k / 3.0, {.dtype = DType::kF64}));
  m.register_buffer("f16", full({2}, -k / 3.0, {.dtype = DType::kF16}));
  m.register_buffer("bf16", full({2}, k / 3.0, {.dtype = DType::kBF16}));
  m.register_buffer("i64", from_vector<int64_t>({(int64_t{1} << 53) - r, -(int64_t{1} << 52) - 1 - r}, {2}));
  m.register_buffer("i32", from_vector<int32_t>({2147483647 - r}, {1}));
  m.register_buffer("flag", full({}, r == 0 ? 1.0 : 0.0, {.dtype = DType::kBool}));
  Generator g(50 + static_cast<uint64_t>(r));
  m.register_buffer("transposed", randn({2, 3}, {}, &g).t());
  std::vector<Tensor> own;
  for (const NamedTensor& b : m.named_buffers()) own.push_back(b.tensor.clone());
  Module empty_model;
  DistributedDataParallel ddp(m, pg);  // broadcasts them already: give every rank its own values back
  DistributedDataParallel no_buffers(empty_model, pg);
  no_buffers.sync_buffers();  // nothing to send: must not be a collective the others do not call
  const std::vector<NamedTensor> buffers = m.named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) copy_(buffers[i].tensor, own[i]);
  ddp.sync_buffers();
  for (const NamedTensor& b : buffers) {
    const Tensor all = pg.all_gather(b.tensor.contiguous());
    for (int q = 1; q < n; ++q) {
      c.expect(same_bits(all.select(0, q).contiguous(), all.select(0, 0).contiguous()),
               detail::cat("every dtype: ", b.name, " (", dtype_name(b.tensor.dtype()), "): rank ", q,
                           " holds other bits than rank 0"));
    }
  }
  c.expect(m.named_buffers()[4].tensor.data<int64_t>()[0] == (int64_t{1} << 53), "every dtype: i64 2^53");
}

// The Trainer syncs the buffers before each step's forward (checked from inside the task's loss, where the
// forward begins) and before each evaluation (checked after fit(), whose last act is an evaluation in eval
// mode, which leaves the buffers alone).
void check_trainer_syncs(ProcessGroup& pg, DistChecker& c) {
  const int n = pg.size(), r = pg.rank();
  Generator gdata(7);  // one dataset; the loader shards it
  const int64_t rows = kB * n * kSteps;
  Tensor x = randn({rows, 1, 6, 6}, {}, &gdata);
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (int64_t& v : labels) v = static_cast<int64_t>(gdata.next_u32() % 2);
  auto data = std::make_shared<TensorDataset>(std::vector<Tensor>{x, from_vector(labels, {rows})});
  DataLoader train(data, {.batch_size = kB, .shard = {.rank = r, .world_size = n}});
  DataLoader eval(data, {.batch_size = kB});
  auto net = small_bn_net(11);
  SGD sgd(net->named_parameters(), {.lr = 0.1});
  Task task = classification_task([&](const Tensor& in) { return net->forward(in); });
  Task checked = task;
  int64_t calls = 0;
  checked.loss = [&](const Example& batch) {
    ++calls;
    c.expect(all_ranks_hold_rank0s(gather_buffers(pg, *net), n),
             detail::cat("trainer: forward ", calls, " starts with buffers that differ between ranks"));
    return task.loss(batch);
  };
  Trainer trainer({.max_steps = kSteps, .warmup_steps = 0, .process_group = &pg}, *net, checked, sgd, train, &eval);
  const absl::StatusOr<RunSummary> summary = trainer.fit();
  c.expect(summary.ok(), summary.ok() ? "" : std::string(summary.status().message()));
  c.expect(calls == kSteps, detail::cat("trainer: ", calls, " forwards"));
  c.expect(all_ranks_hold_rank0s(gather_buffers(pg, *net), n), "trainer: buffers differ after the evaluation");
}

// |a - b| <= rtol |b| + atol everywhere: the worst element's share of that tolerance (<= 1 passes).
double share_of_tolerance(const Tensor& a, const Tensor& b, double rtol, double atol) {
  const Tensor x = a.detach().to(DType::kF64).contiguous(), y = b.detach().to(DType::kF64).contiguous();
  double worst = x.shape() == y.shape() ? 0.0 : 1e30;
  for (int64_t i = 0; worst < 1e30 && i < x.numel(); ++i) {
    const double e = y.data<double>()[i];
    worst = std::max(worst, std::fabs(x.data<double>()[i] - e) / (rtol * std::fabs(e) + atol));
  }
  return worst;
}

// SyncBatchNorm on N ranks against BatchNorm2d in one process over the global batch. Rank r holds 2r rows
// (3 in a world of one): unequal counts weigh the ranks' statistics, and rank 0's batch is empty (it must
// still take part in both collectives). The rows are drawn around a mean per rank (the merge must add the
// spread between the ranks' means). Rank r takes the loss sum(y_r * dy_r): its x gradient must be the
// rows' gradient of the one-process loss sum(y * dy), its weight and bias gradients summed over the ranks
// that loss's, and every rank's running statistics the one process's. Returns the worst share of the
// tolerance.
double check_sync_batchnorm(ProcessGroup& pg, DistChecker& c) {
  const int n = pg.size(), r = pg.rank();
  constexpr int64_t kC = 3;
  auto rows = [n](int q) -> int64_t { return n == 1 ? 3 : 2 * q; };
  std::vector<Tensor> xs, dys;
  Generator gdata(21);  // the same global batch on every rank
  for (int q = 0; q < n; ++q) {
    Tensor xq = empty({rows(q), kC, 3, 4});
    normal_(xq, 2.0 * q - 1.0, 1.5, &gdata);
    xs.push_back(xq);
    dys.push_back(randn({rows(q), kC, 3, 4}, {}, &gdata));
  }
  BatchNorm2d ref(kC), synced(kC, {.process_group = &pg});
  Generator gparam(22);
  const Tensor w = randn({kC}, {}, &gparam), b = randn({kC}, {}, &gparam);
  for (BatchNorm2d* bn : {&ref, &synced}) {
    copy_(bn->weight.detach(), w);
    copy_(bn->bias.detach(), b);
  }
  Tensor x_all = cat(xs, 0).set_requires_grad(true), x_mine = xs[r].clone().set_requires_grad(true);
  Tensor y_all, y_mine;
  for (int step = 0; step < 2; ++step) {  // two running-statistics updates
    y_all = ref.forward(x_all);
    y_mine = synced.forward(x_mine);
  }
  sum(mul(y_all, cat(dys, 0))).backward();
  sum(mul(y_mine, dys[r])).backward();
  Tensor dw = synced.weight.grad().clone(), db = synced.bias.grad().clone();
  pg.all_reduce(dw);
  pg.all_reduce(db);
  int64_t offset = 0;
  for (int q = 0; q < r; ++q) offset += rows(q);
  // As in tests/models/sync_batch_norm_test.cc: the same formulas in another order (the fused kernel's f64
  // statistics against composed f32 ops and the merge of the ranks' statistics), float rounding apart.
  constexpr double kRtol = 1e-5, kAtol = 1e-6;
  const std::pair<const char*, double> shares[] = {
      {"output", share_of_tolerance(y_mine, y_all.narrow(0, offset, rows(r)), kRtol, kAtol)},
      {"x gradient", share_of_tolerance(x_mine.grad(), x_all.grad().narrow(0, offset, rows(r)), kRtol, kAtol)},
      {"weight gradient", share_of_tolerance(dw, ref.weight.grad(), kRtol, kAtol)},
      {"bias gradient", share_of_tolerance(db, ref.bias.grad(), kRtol, kAtol)},
      {"running_mean", share_of_tolerance(synced.running_mean, ref.running_mean, kRtol, kAtol)},
      {"running_var", share_of_tolerance(synced.running_var, ref.running_var, kRtol, kAtol)}};
  double worst = 0;
  for (const auto& [what, share] : shares) {
    worst = std::max(worst, share);
    c.expect(share <= 1.0,
             detail::cat("sync batchnorm: ", what, " differs from one process's by ", share, " times the tolerance"));
  }
  // Every rank computes the statistics from the same all-reduced bits: identical running statistics.
  c.expect(all_ranks_hold_rank0s(gather_buffers(pg, synced), n), "sync batchnorm: the ranks' buffers differ");
  return worst;
}

// The example at the top of models/layers/sync_batch_norm.h, verbatim, then one training forward on data
// of each rank's own: the running statistics must come out the same on every rank.
void check_header_example(DistChecker& c) {
  auto pg = init_process_group();  // under mpirun
  CNN model;
  convert_sync_batchnorm(model, *pg);  // bn1 and bn2 now use the statistics of all ranks
  DistributedDataParallel ddp(model, *pg);
  Generator g(30 + static_cast<uint64_t>(pg->rank()));
  model.forward(randn({2, 1, 28, 28}, {}, &g));
  c.expect(all_ranks_hold_rank0s(gather_buffers(*pg, model), pg->size()), "header example: buffers differ");
}

}  // namespace

int run_batchnorm_checks(ProcessGroup& pg, int& checks) {
  DistChecker c{.rank = pg.rank(), .suite = "batchnorm"};
  check_sync_buffers(pg, c, BroadcastBuffers::kYes);
  check_sync_buffers(pg, c, BroadcastBuffers::kNo);
  check_every_dtype(pg, c);
  check_trainer_syncs(pg, c);
  check_header_example(c);
  Tensor worst = full({1}, check_sync_batchnorm(pg, c), {.dtype = DType::kF64});
  pg.all_reduce(worst, ReduceOp::kMax);  // of every rank
  if (pg.rank() == 0) {
    std::printf(
        "batchnorm: %d ranks: sync_buffers() gives every rank rank 0's buffers (kNo: its own), and the "
        "Trainer calls it before each step and evaluation; SyncBatchNorm follows one process's BatchNorm2d "
        "(worst %.2g of the tolerance)\n",
        pg.size(), worst.item());
  }
  checks += c.checks;
  return c.failures;
}

}  // namespace mantissa

// ZeRO-1 on N ranks (tests/dist/dist_test.sh runs a world of one, 2 and 3 ranks):
//  - reduce_scatter_async and all_gather_regions with uneven and empty regions, f32 and f64, sum and max,
//    and their argument errors;
//  - two replicas of one model, one under DistributedDataParallel with a whole Adam, the other under
//    DistributedDataParallel + ZeroRedundancy with a sharded Adam (amsgrad, weight decay, two param
//    groups), 6 steps with clipping that bites: the clipping norms, the weights and the gathered optimizer
//    state must equal the whole ones bit for bit (see train/zero.h for where they might not: none here);
//  - each rank holds about 1/N of the state, and all of it together;
//  - the whole state loaded into a fresh sharded optimizer gives the same state back, and an entry of the
//    wrong shape is refused naming it;
//  - the precision ladder's rungs (bf16 weights rounded stochastically with 8-bit state, Kahan with bf16 state,
//    fp32 masters with 8-bit state): AdamW under ZeRO-1 equals it under DDP bit for bit (weights, clipping norms,
//    the gathered codes, absmax and compensation), and its whole state shards and gathers back.
#include "tests/dist/zero_dist.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/norm_order.h"
#include "tests/dist/checker.h"
#include "train/ddp.h"
#include "train/zero.h"

namespace mantissa {
namespace {

// 1 x 400 -> 160 -> 100 -> 3: layers.0.weight has 64000 elements (4 norm blocks), so shards are cut
// inside it; the others are whole.
constexpr int64_t kIn = 400, kOut = 3, kB = 4, kSteps = 6;

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Every parameter of the two replicas, bit for bit.
bool same_parameters(Module& a, Module& b) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  bool equal = pa.size() == pb.size();
  for (size_t i = 0; equal && i < pa.size(); ++i) equal = same_bits(pa[i].tensor, pb[i].tensor);
  return equal;
}

// The same entries with the same bits.
bool same_state(const OptimizerState& a, const OptimizerState& b) {
  bool same = a.tensors.size() == b.tensors.size();
  for (const auto& [key, t] : b.tensors) same = same && a.tensors.count(key) && same_bits(a.tensors.at(key), t);
  return same;
}

// Both optimizers' step, the shards gathered, the grads dropped: one iteration of each side.
void step_both(Optimizer& whole, Optimizer& sharded, ZeroRedundancy& zero) {
  whole.step();
  sharded.step();
  zero.gather_parameters();
  whole.zero_grad();
  sharded.zero_grad();
}

double get(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kF64 ? t.data<double>()[i] : static_cast<double>(t.data<float>()[i]);
}
void set(const Tensor& t, int64_t i, double v) {
  if (t.dtype() == DType::kF64) {
    t.data<double>()[i] = v;
  } else {
    t.data<float>()[i] = static_cast<float>(v);
  }
}

void check_collectives(ProcessGroup& pg, DistChecker& c) {
  const int n = pg.size(), r = pg.rank();
  // Region of rank k: 2k + 1 elements, except that rank 1 (when there is one) gets none.
  std::vector<int64_t> counts;
  for (int k = 0; k < n; ++k) counts.push_back(k == 1 ? 0 : 2 * k + 1);
  int64_t total = 0, mine = 0;
  for (int k = 0; k < n; ++k) {
    if (k < r) mine += counts[k];
    total += counts[k];
  }
  for (DType dtype : {DType::kF32, DType::kF64}) {
    Tensor t = empty({total}, {.dtype = dtype});
    for (int64_t i = 0; i < total; ++i) set(t, i, static_cast<double>((r + 1) * (i + 1)));
    pg.reduce_scatter_async(t, counts, ReduceOp::kSum)->wait();
    bool ok = true;
    for (int64_t i = mine; i < mine + counts[r]; ++i) ok = ok && get(t, i) == (n * (n + 1) / 2.0) * (i + 1);
    c.expect(ok, detail::cat("reduce_scatter(sum) ", dtype_name(dtype), ": rank ", r, "'s region"));
    for (int64_t i = 0; i < total; ++i) set(t, i, static_cast<double>(r * 1000 + i));
    pg.reduce_scatter_async(t, counts, ReduceOp::kMax)->wait();
    ok = true;
    for (int64_t i = mine; i < mine + counts[r]; ++i) ok = ok && get(t, i) == (n - 1) * 1000.0 + i;
    c.expect(ok, detail::cat("reduce_scatter(max) ", dtype_name(dtype)));
    // Each rank writes its region; afterwards every rank holds all of them.
    fill_(t, -1.0);
    for (int64_t i = mine; i < mine + counts[r]; ++i) set(t, i, static_cast<double>(i * 7));
    pg.all_gather_regions(t, counts);
    ok = true;
    for (int64_t i = 0; i < total; ++i) ok = ok && get(t, i) == i * 7.0;
    c.expect(ok, detail::cat("all_gather_regions ", dtype_name(dtype)));
  }
  // Argument errors are found before any rank communicates: every rank throws.
  auto throws = [&](auto&& f, const std::string& needle, const std::string& what) {
    try {
      f();
      c.expect(false, what + ": no error");
    } catch (const Error& e) {
      c.expect(std::string(e.what()).find(needle) != std::string::npos, what + ": " + e.what());
    }
  };
  std::vector<int64_t> short_counts(counts.begin(), counts.end());
  short_counts.back() += 1;
  Tensor t = zeros({total});
  throws([&] { pg.reduce_scatter_async(t, short_counts)->wait(); }, "add up to", "counts past the tensor");
  throws([&] { pg.all_gather_regions(t, std::vector<int64_t>(static_cast<size_t>(n + 1), 0)); }, "counts for a world",
         "one count too many");
  throws([&] { pg.all_gather_regions(zeros({total}, {.dtype = DType::kBF16}), counts); }, "1-D f32 or f64",
         "a bf16 tensor");
  throws([&] { pg.reduce_scatter_async(t, counts, ReduceOp::kAvg)->wait(); }, "kAvg", "avg");
}

// AdamW under each rung, on replicas of one MLP: plain DDP with the whole optimizer against DDP + ZeroRedundancy.
// The bf16 rungs train the bf16 weights themselves (Module::to) under bf16 autocast, as mantissa-train does.
void check_ladders(ProcessGroup& pg, DistChecker& c, const Tensor& x, const Tensor& y) {
  const int n = pg.size(), r = pg.rank();
  const PrecisionLadder rungs[] = {
      {.master_weights = MasterWeights::kNone,
       .update_rounding = UpdateRounding::kStochastic,
       .optimizer_state = StateStorage::k8bit,
       .seed = 5},
      {.master_weights = MasterWeights::kNone,
       .update_rounding = UpdateRounding::kKahan,
       .optimizer_state = StateStorage::kBf16},
      {.optimizer_state = StateStorage::k8bit},
  };
  const AdamWOptions options{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true};
  for (const PrecisionLadder& ladder : rungs) {
    const bool masters = ladder.master_weights == MasterWeights::kFp32;
    const std::string rung = ladder.str() + ": ";
    Generator ga(7), gb(7), gc(7);
    MLP whole_model(kIn, {160, 100}, kOut, {.generator = &ga});
    MLP sharded_model(kIn, {160, 100}, kOut, {.generator = &gb});
    MLP fresh_model(kIn, {160, 100}, kOut, {.generator = &gc});
    if (!masters) {
      for (MLP* m : {&whole_model, &sharded_model, &fresh_model}) m->to(DType::kBF16);
    }
    DistributedDataParallel ddp_whole(whole_model, pg, {.bucket_cap_mb = 1.0 / 16});
    DistributedDataParallel ddp_sharded(sharded_model, pg, {.bucket_cap_mb = 1.0 / 16});
    AdamW whole(whole_model.named_parameters(), options, ladder);
    AdamW sharded(sharded_model.named_parameters(), options, ladder);
    ZeroRedundancy zero(ddp_sharded, sharded);
    if (masters) {
      whole.enable_working_copies(DType::kBF16);
      zero.enable_working_copies(DType::kBF16);
    }
    // The working copies (fp32 masters) are what the next forward computes with: a wrong one shows in the weights.
    bool equal = true, norms = true;
    for (int64_t s = 0; s < kSteps; ++s) {
      const Tensor xs = x.narrow(0, (s * n + r) * kB, kB), ys = y.narrow(0, (s * n + r) * kB, kB);
      {
        amp::AutocastGuard autocast({.dtype = DType::kBF16});
        mse_loss(whole_model.forward(xs).to(DType::kF32), ys).backward();
        mse_loss(sharded_model.forward(xs).to(DType::kF32), ys).backward();
      }
      ddp_whole.finish();
      zero.finish();
      const double max_norm = 0.05;
      const Tensor total_whole = enqueue_clip_grad_norm_(whole_model.named_parameters(), max_norm);
      const Tensor total_sharded = zero.clip_grad_norm_(max_norm);
      norms = norms && same_bits(total_whole, total_sharded) && total_whole.item() > max_norm;
      step_both(whole, sharded, zero);
      equal = equal && same_parameters(whole_model, sharded_model);
    }
    c.expect(norms, rung + "the clipping norms differ from plain DDP's (or did not clip)");
    c.expect(equal, rung + "the weights differ from plain DDP's");
    const OptimizerState gathered = zero.state_dict(), reference = whole.state_dict();
    c.expect(
        gathered.ladder == reference.ladder && gathered.tensors.size() == reference.tensors.size(),
        detail::cat(rung, "gathered state: ", gathered.tensors.size(), " entries, whole: ", reference.tensors.size()));
    for (const auto& [key, t] : reference.tensors) {
      auto it = gathered.tensors.find(key);
      c.expect(it != gathered.tensors.end() && same_bits(it->second, t), rung + "gathered state entry " + key);
    }
    DistributedDataParallel ddp_fresh(fresh_model, pg, {.bucket_cap_mb = 1.0 / 16});
    AdamW fresh(fresh_model.named_parameters(), options, ladder);
    ZeroRedundancy zero_fresh(ddp_fresh, fresh);
    fresh.load_state_dict(zero_fresh.shard_state(reference));
    c.expect(same_state(zero_fresh.state_dict(), reference), rung + "the whole state, sharded and gathered again");
    if (ladder.optimizer_state == StateStorage::k8bit) {
      OptimizerState bad = reference;
      bad.tensors["layers.0.weight/exp_avg.absmax"] = zeros({3});
      try {
        (void)zero_fresh.shard_state(bad);
        c.expect(false, rung + "an absmax of the wrong length: no error");
      } catch (const Error& e) {
        c.expect(std::string(e.what()).find("'layers.0.weight/exp_avg.absmax' is [3], the parameter's 8-bit blocks "
                                            "[32]") != std::string::npos,
                 rung + "an absmax of the wrong length: " + e.what());
      }
    }
  }
}

}  // namespace

int run_zero_checks(ProcessGroup& pg, int& checks) {
  const int n = pg.size(), r = pg.rank();
  DistChecker c{.rank = r, .suite = "zero"};
  check_collectives(pg, c);

  Generator gdata(23);
  const Tensor x = randn({kSteps * n * kB, kIn}, {}, &gdata), y = randn({kSteps * n * kB, kOut}, {}, &gdata);
  Generator ga(7), gb(7);
  MLP whole_model(kIn, {160, 100}, kOut, {.generator = &ga});
  MLP sharded_model(kIn, {160, 100}, kOut, {.generator = &gb});
  // Small buckets (64 KiB): several reduce-scatters, and a parameter larger than the cap in one of its own.
  DistributedDataParallel ddp_whole(whole_model, pg, {.bucket_cap_mb = 1.0 / 16});
  DistributedDataParallel ddp_sharded(sharded_model, pg, {.bucket_cap_mb = 1.0 / 16});
  // Two groups: the weights with decay and amsgrad, the biases without.
  auto groups = [](MLP& m) {
    std::vector<NamedTensor> weights, biases;
    for (const NamedTensor& p : m.named_parameters()) (p.tensor.dim() == 2 ? weights : biases).push_back(p);
    return std::pair{weights, biases};
  };
  auto [ww, wb] = groups(whole_model);
  auto [sw, sb] = groups(sharded_model);
  const AdamOptions decayed{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true}, plain{.lr = 1e-2};
  Adam whole(ww, decayed), sharded(sw, decayed);
  whole.add_param_group(wb, plain);
  sharded.add_param_group(sb, plain);
  ZeroRedundancy zero(ddp_sharded, sharded);

  // Each rank's shard is about 1/N of the elements (cuts every norm_order::kBlock), all of them together.
  Tensor numel = full({1}, static_cast<double>(zero.shard_numel()), {.dtype = DType::kI64});
  pg.all_reduce(numel);
  c.expect(numel.item<int64_t>() == zero.total_numel(),
           detail::cat("the shards hold ", numel.item<int64_t>(), " of ", zero.total_numel(), " elements"));
  c.expect(std::abs(zero.shard_numel() - zero.total_numel() / n) <= norm_order::kBlock,
           detail::cat("rank ", r, "'s shard has ", zero.shard_numel(), " of ", zero.total_numel(), " elements"));

  for (int64_t s = 0; s < kSteps; ++s) {
    const Tensor xs = x.narrow(0, (s * n + r) * kB, kB), ys = y.narrow(0, (s * n + r) * kB, kB);
    mse_loss(whole_model.forward(xs), ys).backward();
    ddp_whole.finish();
    mse_loss(sharded_model.forward(xs), ys).backward();
    zero.finish();
    const double max_norm = 0.05;  // below the grads' norm: every step clips
    // In the optimizer's order (its groups', as the Trainer clips): the order of the norm's partial sums.
    std::vector<NamedTensor> in_group_order = ww;
    in_group_order.insert(in_group_order.end(), wb.begin(), wb.end());
    const Tensor total_whole = enqueue_clip_grad_norm_(in_group_order, max_norm);
    const Tensor total_sharded = zero.clip_grad_norm_(max_norm);
    c.expect(same_bits(total_whole, total_sharded) && total_whole.item() > max_norm,
             detail::cat("step ", s, ": clipping norm ", total_whole.item(), " (whole) vs ", total_sharded.item()));
    step_both(whole, sharded, zero);
    c.expect(same_parameters(whole_model, sharded_model),
             detail::cat("step ", s, ": the weights differ from plain DDP's"));
  }

  // The state: 1/N per rank (Adam with amsgrad: 3 f32 buffers per element), the whole equal to plain DDP's.
  int64_t state_elements = 0;
  for (const auto& [key, t] : sharded.state_dict().tensors)
    if (key.find("/step") == std::string::npos) state_elements += t.numel();
  c.expect(state_elements < 3 * zero.shard_numel() + 1 && state_elements > 0,
           detail::cat("rank ", r, " holds ", state_elements, " state elements for a shard of ", zero.shard_numel()));
  const OptimizerState gathered = zero.state_dict(), reference = whole.state_dict();
  c.expect(gathered.tensors.size() == reference.tensors.size(),
           detail::cat("gathered state: ", gathered.tensors.size(), " entries, whole: ", reference.tensors.size()));
  for (const auto& [key, t] : reference.tensors) {
    auto it = gathered.tensors.find(key);
    c.expect(it != gathered.tensors.end() && same_bits(it->second, t), "gathered state entry " + key);
  }
  c.expect(gathered.groups.size() == 2 && gathered.groups[0].params == reference.groups[0].params &&
               gathered.groups[1].hyperparameters == reference.groups[1].hyperparameters,
           "gathered groups");

  // The whole state into a fresh sharded optimizer, and back.
  Generator gc(7);
  MLP fresh_model(kIn, {160, 100}, kOut, {.generator = &gc});
  DistributedDataParallel ddp_fresh(fresh_model, pg, {.bucket_cap_mb = 1.0 / 16});
  auto [fw, fb] = groups(fresh_model);
  Adam fresh(fw, decayed);
  fresh.add_param_group(fb, plain);
  ZeroRedundancy zero_fresh(ddp_fresh, fresh);
  fresh.load_state_dict(zero_fresh.shard_state(reference));
  c.expect(same_state(zero_fresh.state_dict(), reference), "the whole state, sharded and gathered again");
  OptimizerState bad = reference;
  bad.tensors["layers.0.weight/exp_avg"] = zeros({3, 3});
  try {
    (void)zero_fresh.shard_state(bad);
    c.expect(false, "a wrong-shaped entry: no error");
  } catch (const Error& e) {
    c.expect(std::string(e.what()).find("'layers.0.weight/exp_avg' is [3, 3]") != std::string::npos,
             std::string("a wrong-shaped entry: ") + e.what());
  }
  check_ladders(pg, c, x, y);
  if (r == 0)
    std::printf("zero: %d ranks: rank 0 holds %lld of %lld parameters' state (%lld state elements)\n", n,
                static_cast<long long>(zero.shard_numel()), static_cast<long long>(zero.total_numel()),
                static_cast<long long>(state_elements));
  checks += c.checks;
  return c.failures;
}

}  // namespace mantissa

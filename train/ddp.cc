// DistributedDataParallel (train/ddp.h): bucket assignment, the post-accumulate hooks that launch a bucket's
// all-reduce once all its grads are in, and finish(), which waits and writes the means back.
#include "train/ddp.h"

#include <cstdint>
#include <optional>
#include <string>

#include "framework/error.h"
#include "ops/elementwise/elementwise.h"
#include "train/rank_agreement.h"

namespace mantissa {

namespace {

struct Bucket {
  std::vector<size_t> params;    // indices into State::params, in bucket order
  std::vector<int64_t> offsets;  // element offset of each in `flat`
  Tensor flat;                   // f32 [numel of all], allocated once
  int pending = 0;               // grads not yet accumulated in this backward
  std::unique_ptr<Work> work;    // the all-reduce in flight, null when none
};

}  // namespace

struct DistributedDataParallel::State {
  ProcessGroup* group = nullptr;
  std::vector<NamedTensor> params;
  std::vector<NamedTensor> buffers;
  Tensor buffer_flat;  // f64 [numel of all buffers], on the buffers' device; undefined without buffers
  BroadcastBuffers broadcast_buffers = BroadcastBuffers::kYes;
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;  // per parameter
  std::vector<bool> ready;        // per parameter: its grad is in for this backward
  size_t next_launch = 0;         // buckets launch in index order on every rank (collectives must match)
  bool sync = true;               // false inside no_sync()
  bool any_ready = false;         // a synced backward has started since the last finish()
  // ZeRO-1: per bucket, one count per rank for a reduce-scatter; empty: all-reduce.
  std::vector<std::vector<int64_t>> scatter_counts;

  void reset() {
    for (Bucket& b : buckets) {
      b.pending = static_cast<int>(b.params.size());
      b.work.reset();
    }
    ready.assign(params.size(), false);
    next_launch = 0;
    any_ready = false;
  }

  // Copies bucket `b`'s grads into its flat buffer divided by the world size and starts the all-reduce.
  void launch(Bucket& b) {
    const float n = static_cast<float>(group->size());
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = params[b.params[k]].tensor;
      copy_(b.flat.narrow(0, b.offsets[k], p.numel()).view(p.shape()), p.grad());
    }
    if (b.flat.device().is_cpu()) {
      float* f = b.flat.data<float>();
      for (int64_t i = 0, e = b.flat.numel(); i < e; ++i) f[i] /= n;
    } else {
      copy_(b.flat, div(b.flat, static_cast<double>(n)));  // a GPU bucket: the same f32 division, on the device
    }
    const size_t index = static_cast<size_t>(&b - buckets.data());
    b.work = scatter_counts.empty() ? group->all_reduce_async(b.flat, ReduceOp::kSum)
                                    : group->reduce_scatter_async(b.flat, scatter_counts[index], ReduceOp::kSum);
  }

  // Every buffer of rank 0 into every other rank's, in one broadcast. The buffers are packed in registration
  // order into one f64 tensor: every f32, f16, bf16 and f64 value, and every integer below 2^53 in
  // magnitude (a step counter such as num_batches_tracked), goes there and back exactly, and one collective
  // of all dtypes costs one latency instead of one per buffer (a ResNet-50 has 159 buffers). The widening
  // doubles the bytes of f32 statistics, which are small next to the gradients reduced in the same step.
  void broadcast_buffers_from_rank0() {
    if (buffers.empty()) return;
    const bool root = group->rank() == 0;
    int64_t offset = 0;
    if (root) {
      for (const NamedTensor& b : buffers) {
        copy_(buffer_flat.narrow(0, offset, b.tensor.numel()).view(b.tensor.shape()), b.tensor);
        offset += b.tensor.numel();
      }
    }
    group->broadcast(buffer_flat, 0);
    if (root) return;
    for (const NamedTensor& b : buffers) {
      copy_(b.tensor, buffer_flat.narrow(0, offset, b.tensor.numel()).view(b.tensor.shape()));
      offset += b.tensor.numel();
    }
  }

  void mark_ready(size_t i) {
    MT_CHECK(!ready[i], "DistributedDataParallel: parameter '", params[i].name,
             "' got a second gradient before finish(). HINT: call finish() after every backward outside "
             "no_sync(); a parameter used twice in one graph is fine");
    ready[i] = true;
    any_ready = true;
    --buckets[bucket_of[i]].pending;
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) launch(buckets[next_launch++]);
    for (size_t b = 0; b < next_launch; ++b) buckets[b].work->is_completed();  // lets MPI make progress
  }
};

DistributedDataParallel::DistributedDataParallel(Module& module, ProcessGroup& group, DDPOptions options)
    : state_(std::make_shared<State>()) {
  MT_CHECK(options.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got ",
           options.bucket_cap_mb);
  State& s = *state_;
  s.group = &group;
  s.params = module.named_parameters();
  // As PyTorch's DDP does when it is built: the same parameters on every rank, or the broadcasts below would
  // meet tensors of other sizes (an MPI truncation error naming neither side, or a hang).
  if (group.size() > 1) {
    if (const std::optional<std::string> d = parameters_disagree(group, s.params)) {
      MT_THROW("DistributedDataParallel: ", *d, ". HINT: build the same model on every rank");
    }
  }
  for (const NamedTensor& p : s.params) {
    // bf16 parameters are the precision ladder's weights without masters (optim/precision_ladder.h): their grads are
    // widened into the f32 buckets (exactly), averaged there, and rounded back once.
    MT_CHECK(p.tensor.dtype() == DType::kF32 || p.tensor.dtype() == DType::kBF16,
             "DistributedDataParallel: parameter '", p.name, "' is ", dtype_name(p.tensor.dtype()),
             shape_str(p.tensor.shape()),
             ". HINT: keep the masters in f32 and use autocast for lower precision (or bf16 weights with the precision "
             "ladder's master_weights=none)");
    MT_CHECK(p.tensor.device() == s.params.front().tensor.device(), "DistributedDataParallel: parameter '", p.name,
             "' is on ", p.tensor.device().str(), ", '", s.params.front().name, "' on ",
             s.params.front().tensor.device().str(), ". HINT: move the whole model with module.to(device) first");
    group.broadcast(p.tensor, 0);
  }
  // The buffers start as rank 0's whatever broadcast_buffers says, as in PyTorch.
  s.broadcast_buffers = options.broadcast_buffers;
  s.buffers = module.named_buffers();
  int64_t buffer_numel = 0;
  for (const NamedTensor& b : s.buffers) {
    MT_CHECK(b.tensor.device() == s.buffers.front().tensor.device(), "DistributedDataParallel: buffer '", b.name,
             "' is on ", b.tensor.device().str(), ", '", s.buffers.front().name, "' on ",
             s.buffers.front().tensor.device().str(), ". HINT: move the whole model with module.to(device) first");
    buffer_numel += b.tensor.numel();
  }
  if (!s.buffers.empty()) {
    s.buffer_flat = empty({buffer_numel}, {.dtype = DType::kF64, .device = s.buffers.front().tensor.device()});
  }
  s.broadcast_buffers_from_rank0();

  // Reverse registration order, a new bucket whenever the next parameter would exceed the cap.
  const double cap_bytes = options.bucket_cap_mb * 1024.0 * 1024.0;
  s.bucket_of.resize(s.params.size());
  int64_t bytes = 0;
  for (size_t i = s.params.size(); i-- > 0;) {
    const int64_t pbytes = s.params[i].tensor.numel() * static_cast<int64_t>(sizeof(float));
    if (s.buckets.empty() || static_cast<double>(bytes + pbytes) > cap_bytes) {
      s.buckets.emplace_back();
      bytes = 0;
    }
    Bucket& b = s.buckets.back();
    b.offsets.push_back(bytes / static_cast<int64_t>(sizeof(float)));
    b.params.push_back(i);
    s.bucket_of[i] = s.buckets.size() - 1;
    bytes += pbytes;
  }
  for (Bucket& b : s.buckets) {
    const size_t last = b.params.back();
    // On the parameters' device: a GPU model's buckets are reduced by an NCCL group on the GPU.
    b.flat = empty({b.offsets.back() + s.params[last].tensor.numel()},
                   {.dtype = DType::kF32, .device = s.params[last].tensor.device()});
  }
  s.reset();

  // The hooks hold the state weakly: they outlive this object on the parameters and must then do nothing.
  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    s.params[i].tensor.register_post_accumulate_grad_hook([weak, i](Tensor&) {
      if (std::shared_ptr<State> st = weak.lock(); st && st->sync) st->mark_ready(i);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::finish() {
  State& s = *state_;
  if (!s.sync) return;
  MT_CHECK(s.any_ready,
           "DistributedDataParallel::finish: no backward ran since the last finish(). HINT: "
           "call it once after each backward outside no_sync()");
  std::string unused;
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (!s.ready[i]) unused += (unused.empty() ? "'" : ", '") + s.params[i].name + "'";
  }
  if (!unused.empty()) {
    for (size_t b = 0; b < s.next_launch; ++b) s.buckets[b].work->wait();  // MPI still owns the buffers
    s.reset();
    MT_THROW("DistributedDataParallel::finish: parameters got no gradient in this backward: ", unused,
             ". HINT: every parameter must take part in the loss on every rank (unused parameters are not "
             "supported); leave unused ones out of the module or freeze them (requires_grad false) before "
             "constructing DistributedDataParallel");
  }
  // Wait for each bucket in launch order (same on every rank) and copy its means back. wait() keeps MPI
  // progressing every request in flight and throws after the group's timeout (a busy loop over
  // is_completed() would spin forever when a rank stops answering).
  for (Bucket& b : s.buckets) {
    b.work->wait();
    if (!s.scatter_counts.empty()) continue;  // ZeRO-1 reads its region of the flat buffer
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = s.params[b.params[k]].tensor;
      copy_(p.grad(), b.flat.narrow(0, b.offsets[k], p.numel()).view(p.shape()));
    }
  }
  // ZeRO-1: the grads were packed into the buckets; the reduced values live in this rank's regions only.
  if (!s.scatter_counts.empty()) {
    for (const NamedTensor& p : s.params) Tensor(p.tensor).set_grad(Tensor());
  }
  s.reset();
}

std::vector<DistributedDataParallel::BucketLayout> DistributedDataParallel::bucket_layout() const {
  std::vector<BucketLayout> out;
  for (const Bucket& b : state_->buckets) out.push_back({.params = b.params, .offsets = b.offsets, .flat = b.flat});
  return out;
}

const std::vector<NamedTensor>& DistributedDataParallel::parameters() const { return state_->params; }

void DistributedDataParallel::reduce_scatter_grads(std::vector<std::vector<int64_t>> counts) {
  State& s = *state_;
  MT_CHECK(counts.size() == s.buckets.size(), "DistributedDataParallel::reduce_scatter_grads: ", counts.size(),
           " count lists for ", s.buckets.size(), " buckets");
  MT_CHECK(!s.any_ready, "DistributedDataParallel::reduce_scatter_grads: a synced backward is in flight");
  for (size_t b = 0; b < counts.size(); ++b)
    dist_detail::check_regions(s.buckets[b].flat, counts[b], s.group->size(), "reduce_scatter_grads");
  s.scatter_counts = std::move(counts);
}

void DistributedDataParallel::sync_buffers() {
  if (state_->broadcast_buffers == BroadcastBuffers::kYes) state_->broadcast_buffers_from_rank0();
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.state_->sync) {
  ddp.state_->sync = false;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.state_->sync = previous_; }

DistributedDataParallel::NoSync DistributedDataParallel::no_sync() {
  MT_CHECK(!state_->any_ready,
           "DistributedDataParallel::no_sync: a synced backward has not been finished. "
           "HINT: call finish() before entering no_sync()");
  return NoSync(*this);
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : state_->buckets) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(state_->params[i].name);
  }
  return out;
}

ProcessGroup& DistributedDataParallel::group() const { return *state_->group; }

}  // namespace mantissa

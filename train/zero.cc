// ZeroRedundancy (train/zero.h): the cut of the parameters into shards, the shard's grads after the
// reduce-scatter, the sharded clipping norm, the all-gather of the masters and the whole state for checkpoints.
#include "train/zero.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "ops/elementwise/elementwise.h"
#include "optim/low_precision.h"
#include "optim/norm_order.h"

namespace mantissa {
namespace {

// The cuts of a flat space of `total` elements into `ranks` ranges, each cut the candidate nearest to an
// even split and after the one before. `candidates` ascend and start at 0. Throws when a range is empty.
std::vector<int64_t> cut_ranges(const std::vector<int64_t>& candidates, int64_t total, int ranks) {
  std::vector<int64_t> cuts{0};
  for (int r = 1; r < ranks; ++r) {
    const int64_t ideal = (total * r + ranks / 2) / ranks;
    auto it = std::lower_bound(candidates.begin(), candidates.end(), ideal);
    int64_t pick = it == candidates.end() ? total : *it;
    if (it != candidates.begin() && ideal - *(it - 1) < pick - ideal) pick = *(it - 1);
    if (pick <= cuts.back()) {
      auto next = std::upper_bound(candidates.begin(), candidates.end(), cuts.back());
      pick = next == candidates.end() ? total : *next;
    }
    MT_CHECK(pick < total, "ZeroRedundancy: the parameters (", total, " elements, cut at parameter starts and every ",
             norm_order::kBlock, " elements) cannot give each of ", ranks,
             " ranks a shard. HINT: use fewer ranks, or DistributedDataParallel alone for so small a model");
    cuts.push_back(pick);
  }
  cuts.push_back(total);
  return cuts;
}

}  // namespace

ZeroRedundancy::ZeroRedundancy(DistributedDataParallel& ddp, Optimizer& optimizer)
    : ddp_(ddp), optimizer_(optimizer), buckets_(ddp.bucket_layout()) {
  const std::vector<NamedTensor>& params = ddp_.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    param_index_[params[i].name] = i;
    MT_CHECK(params[i].tensor.device().is_cpu(), "ZeroRedundancy: parameter '", params[i].name, "' is on ",
             params[i].tensor.device().str(),
             "; ZeRO-1 is written for CPU parameters over MPI (the NCCL group has no reduce-scatter yet). HINT: "
             "train GPU models with DistributedDataParallel alone");
  }
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    group_names_.emplace_back();
    for (const NamedTensor& p : optimizer_.group_params(g)) {
      MT_CHECK(param_index_.count(p.name), "ZeroRedundancy: the optimizer's parameter '", p.name,
               "' is not a parameter of the DistributedDataParallel's module. HINT: build the optimizer on "
               "model.named_parameters()");
      MT_CHECK(params[param_index_.at(p.name)].tensor.is_same(p.tensor), "ZeroRedundancy: the optimizer's '", p.name,
               "' is another tensor than the module's parameter of that name");
      group_names_.back().push_back(p.name);
    }
  }

  // The flat space: buckets in order, each bucket's parameters at their offsets.
  const int ranks = ddp_.group().size(), rank = ddp_.group().rank();
  std::vector<int64_t> bucket_start, candidates;
  int64_t total = 0;
  for (const auto& b : buckets_) {
    bucket_start.push_back(total);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const int64_t n = params[b.params[k]].tensor.numel();
      for (int64_t at = 0; at < n; at += norm_order::kBlock) candidates.push_back(total + b.offsets[k] + at);
    }
    total += b.flat.numel();
  }
  const std::vector<int64_t> cuts = cut_ranges(candidates, total, ranks);

  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const auto& b = buckets_[bi];
    const int64_t start = bucket_start[bi], stop = start + b.flat.numel();
    std::vector<int64_t>& counts = counts_.emplace_back();
    for (int r = 0; r < ranks; ++r)
      counts.push_back(std::max<int64_t>(0, std::min(stop, cuts[r + 1]) - std::max(start, cuts[r])));
    for (size_t k = 0; k < b.params.size(); ++k) {
      const int64_t o = start + b.offsets[k], n = params[b.params[k]].tensor.numel();
      const int64_t begin = std::max(o, cuts[rank]), end = std::min(o + n, cuts[rank + 1]);
      if (begin >= end) continue;
      slice_of_[params[b.params[k]].name] = slices_.size();
      slices_.push_back({.param = b.params[k],
                         .begin = begin - o,
                         .end = end - o,
                         .bucket = bi,
                         .flat_offset = b.offsets[k] + (begin - o)});
    }
  }
  std::map<std::string, Optimizer::OwnedRange> owned;
  for (const Slice& s : slices_) owned[params[s.param].name] = {.begin = s.begin, .end = s.end};
  for (const auto& names : group_names_)
    for (const std::string& name : names)
      if (!owned.count(name)) owned[name] = {};  // not this rank's: leaves the optimizer
  optimizer_.shard(owned);
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g)
    for (const NamedTensor& p : optimizer_.group_params(g)) leaves_[p.name] = p.tensor;
  // The clipping norm's layout: the whole parameters in the optimizer's order, this rank's slices of them.
  for (const auto& names : group_names_) {
    for (const std::string& name : names) {
      if (auto it = slice_of_.find(name); it != slice_of_.end()) {
        norm_slices_.push_back(
            {.leaf = leaves_.at(name), .param = norm_sizes_.size(), .begin = slices_[it->second].begin});
      }
      norm_sizes_.push_back(params[param_index_.at(name)].tensor.numel());
    }
  }
  ddp_.reduce_scatter_grads(counts_);
}

void ZeroRedundancy::enable_working_copies(DType dtype) {
  disable_working_copies();
  // As Optimizer::enable_working_copies: f32 masters only (bf16 weights, the precision ladder's master_weights=none,
  // are computed with as they are).
  for (const NamedTensor& p : ddp_.parameters()) {
    working_copies_.push_back(
        {p.name, p.tensor.dtype() == DType::kF32 ? amp::make_working_copy(p.tensor, dtype) : Tensor()});
  }
}

void ZeroRedundancy::disable_working_copies() {
  for (size_t i = 0; i < working_copies_.size(); ++i)
    if (working_copies_[i].tensor.defined()) amp::clear_working_copy(ddp_.parameters()[i].tensor);
  working_copies_.clear();
}

void ZeroRedundancy::refresh_working_copies() {
  NoGradGuard no_grad;
  const std::vector<NamedTensor>& params = ddp_.parameters();
  for (size_t i = 0; i < working_copies_.size(); ++i)
    if (working_copies_[i].tensor.defined()) copy_(working_copies_[i].tensor, params[i].tensor);
}

void ZeroRedundancy::finish() {
  ddp_.finish();
  NoGradGuard no_grad;
  for (auto& [name, leaf] : leaves_) {
    const Slice& s = slices_[slice_of_.at(name)];
    const Tensor region = buckets_[s.bucket].flat.narrow(0, s.flat_offset, s.end - s.begin);
    if (leaf.dtype() == region.dtype()) {
      leaf.set_grad(region);
      continue;
    }
    // bf16 weights (the precision ladder without masters): the mean rounded to bf16 once, as DDP rounds it, into
    // a buffer allocated on the first step.
    Tensor& grad = narrow_grads_[name];
    if (!grad.defined()) grad = empty(region.shape(), {.dtype = leaf.dtype(), .device = region.device()});
    copy_(grad, region);
    leaf.set_grad(grad);
  }
}

Tensor ZeroRedundancy::clip_grad_norm_(double max_norm, NormType norm_type) {
  // bf16 grads (bf16 weights) are widened to f32, clipped there and rounded back, as clip_grad_norm_ does for the
  // whole grads: the same norm, the same scaled bits.
  std::vector<GradSlice> mine;
  std::vector<std::pair<Tensor, Tensor>> narrow;  // {the bf16 grad, its f32 widening}
  for (const NormSlice& s : norm_slices_) {
    const Tensor& grad = s.leaf.grad();
    if (!grad.defined()) continue;
    Tensor wide = grad;
    if (is_low_precision(grad.dtype())) narrow.emplace_back(grad, wide = grad.to(DType::kF32));
    mine.push_back({.grad = wide, .param = s.param, .begin = s.begin});
  }
  Tensor total = clip_sharded_grad_norm_(mine, norm_sizes_, max_norm, norm_type, [&](const Tensor& partials) {
    ddp_.group().all_reduce(partials, ReduceOp::kSum);
  });
  if (!std::isinf(max_norm)) {
    NoGradGuard no_grad;
    for (const auto& [grad, wide] : narrow) copy_(grad, wide);
  }
  return total;
}

void ZeroRedundancy::gather_parameters() {
  NoGradGuard no_grad;
  const std::vector<NamedTensor>& params = ddp_.parameters();
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const auto& b = buckets_[bi];
    for (const Slice& s : slices_) {
      if (s.bucket != bi) continue;
      const Tensor& p = params[s.param].tensor;
      copy_(b.flat.narrow(0, s.flat_offset, s.end - s.begin),
            p.detach().view({p.numel()}).narrow(0, s.begin, s.end - s.begin));
    }
    ddp_.group().all_gather_regions(b.flat, counts_[bi]);
    for (size_t k = 0; k < b.params.size(); ++k) {
      Tensor p = params[b.params[k]].tensor;
      p.set_grad(Tensor());  // gather_grads()' views, now overwritten
      copy_(p.detach(), b.flat.narrow(0, b.offsets[k], p.numel()).view(p.shape()));
    }
  }
  refresh_working_copies();
}

void ZeroRedundancy::gather_grads() {
  const std::vector<NamedTensor>& params = ddp_.parameters();
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const auto& b = buckets_[bi];
    ddp_.group().all_gather_regions(b.flat, counts_[bi]);
    for (size_t k = 0; k < b.params.size(); ++k) {
      Tensor p = params[b.params[k]].tensor;
      const Tensor grad = b.flat.narrow(0, b.offsets[k], p.numel()).view(p.shape());
      p.set_grad(p.dtype() == grad.dtype() ? grad : grad.to(p.dtype()));
    }
  }
}

OptimizerState ZeroRedundancy::state_dict() const {
  const std::vector<NamedTensor>& params = ddp_.parameters();
  const OptimizerState local = optimizer_.state_dict();
  OptimizerState whole{.optimizer = local.optimizer, .ladder = local.ladder};
  // The steps of every parameter: its owners' (all of a parameter's owners step together), 0 for none.
  Tensor steps = zeros({static_cast<int64_t>(params.size())}, {.dtype = DType::kI64});
  for (const auto& [key, t] : local.tensors) {
    const StateKey k = split_state_key(local.optimizer.c_str(), key);
    if (k.state == "step") steps.data<int64_t>()[param_index_.at(k.param)] = t.item<int64_t>();
  }
  ddp_.group().all_reduce(steps, ReduceOp::kMax);
  std::set<std::string> buffers;  // every group's state names (the same hyperparameters on every rank)
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    whole.groups.push_back({.params = group_names_[g], .hyperparameters = local.groups[g].hyperparameters});
    for (const std::string& name : optimizer_.state_names(g)) buffers.insert(name);
  }
  std::map<std::string, size_t> group_of;
  for (size_t g = 0; g < group_names_.size(); ++g)
    for (const std::string& name : group_names_[g]) group_of[name] = g;
  for (const auto& [name, g] : group_of) {
    const int64_t step = steps.data<int64_t>()[param_index_.at(name)];
    if (step == 0) continue;
    Tensor t = zeros({}, {.dtype = DType::kI64});
    t.data<int64_t>()[0] = step;
    whole.tensors[name + "/step"] = t;
  }
  constexpr int64_t kQuantBlock = low_precision::kQuantBlock;
  for (const std::string& buffer : buffers) {
    // Every entry crosses the f32 bucket buffers exactly: f32, bf16 and the 8-bit codes per element, and an 8-bit
    // buffer's ".absmax" (one value per 2048-block; every block lies in one shard, whose cuts fall at multiples of
    // it) at the place of its block's first element.
    const bool per_block = buffer.ends_with(".absmax");
    for (size_t bi = 0; bi < buckets_.size(); ++bi) {
      const auto& b = buckets_[bi];
      for (const Slice& s : slices_) {
        if (s.bucket != bi) continue;
        Tensor region = b.flat.narrow(0, s.flat_offset, s.end - s.begin);
        auto it = local.tensors.find(params[s.param].name + "/" + buffer);
        if (it != local.tensors.end() && !per_block) {
          copy_(region, it->second);
          continue;
        }
        fill_(region, 0.0);
        if (it == local.tensors.end()) continue;
        const Tensor absmax = it->second.contiguous();
        for (int64_t j = 0; j < absmax.numel(); ++j) region.data<float>()[j * kQuantBlock] = absmax.data<float>()[j];
      }
      ddp_.group().all_gather_regions(b.flat, counts_[bi]);
      for (size_t k = 0; k < b.params.size(); ++k) {
        const NamedTensor& p = params[b.params[k]];
        auto g = group_of.find(p.name);
        if (g == group_of.end() || steps.data<int64_t>()[b.params[k]] == 0) continue;
        const auto names = optimizer_.state_names(g->second);
        if (std::find(names.begin(), names.end(), buffer) == names.end()) continue;
        const Optimizer::StateSpec spec = optimizer_.state_spec(p.tensor, buffer);
        const Tensor region = b.flat.narrow(0, b.offsets[k], p.tensor.numel());
        Tensor entry;
        if (per_block) {
          entry = empty(spec.shape, {.dtype = DType::kF32});
          for (int64_t j = 0; j < entry.numel(); ++j) entry.data<float>()[j] = region.data<float>()[j * kQuantBlock];
        } else {
          entry = spec.dtype == DType::kF32 ? region.clone() : region.to(spec.dtype);
        }
        whole.tensors[p.name + "/" + buffer] = entry.view(spec.shape);
      }
    }
  }
  return whole;
}

OptimizerState ZeroRedundancy::shard_state(const OptimizerState& whole) const {
  const std::vector<NamedTensor>& params = ddp_.parameters();
  const char* type = optimizer_.type_name();
  MT_CHECK(whole.optimizer == type, type, ".load_state_dict: the state is from a '", whole.optimizer,
           "' optimizer. HINT: load it into the same kind of optimizer that saved it");
  MT_CHECK(whole.groups.size() == group_names_.size(), type, ".load_state_dict: the state has ", whole.groups.size(),
           " param groups, this optimizer has ", group_names_.size());
  OptimizerState out{.optimizer = whole.optimizer, .ladder = whole.ladder};
  for (size_t g = 0; g < group_names_.size(); ++g) {
    MT_CHECK(whole.groups[g].params == group_names_[g], type, ".load_state_dict: param group ", g,
             " lists other parameters than this optimizer's (", whole.groups[g].params.size(), " against ",
             group_names_[g].size(), ")");
    ParamGroupState& mine = out.groups.emplace_back();
    mine.hyperparameters = whole.groups[g].hyperparameters;
    for (const NamedTensor& p : optimizer_.group_params(g)) mine.params.push_back(p.name);
  }
  for (const auto& [key, t] : whole.tensors) {
    const auto [name, what] = split_state_key(type, key);
    auto index = param_index_.find(name);
    MT_CHECK(index != param_index_.end(), type, ".load_state_dict: unexpected entry '", key, "': no parameter '", name,
             "' in this optimizer");
    const Tensor& param = params[index->second].tensor;
    MT_CHECK(t.defined(), type, ".load_state_dict: entry '", key, "' is an undefined tensor");
    const Optimizer::StateSpec spec = optimizer_.state_spec(param, what);
    MT_CHECK(t.shape() == spec.shape, type, ".load_state_dict: entry '", key, "' is ", shape_str(t.shape()),
             what.ends_with(".absmax") ? ", the parameter's 8-bit blocks " : ", the parameter ", shape_str(spec.shape));
    auto slice = slice_of_.find(name);
    if (slice == slice_of_.end()) continue;  // another rank's
    const Slice& s = slices_[slice->second];
    const Tensor flat = t.contiguous().view({t.numel()});
    constexpr int64_t kQuantBlock = low_precision::kQuantBlock;
    if (what == "step") {
      out.tensors[key] = t;
    } else if (what.ends_with(".absmax")) {  // the shard's blocks: its cuts fall at multiples of the block
      out.tensors[key] =
          flat.narrow(0, s.begin / kQuantBlock, (s.end - s.begin + kQuantBlock - 1) / kQuantBlock).clone();
    } else {
      out.tensors[key] = flat.narrow(0, s.begin, s.end - s.begin).clone();
    }
  }
  return out;
}

int64_t ZeroRedundancy::shard_numel() const {
  int64_t n = 0;
  for (const Slice& s : slices_) n += s.end - s.begin;
  return n;
}

int64_t ZeroRedundancy::total_numel() const {
  int64_t n = 0;
  for (const auto& b : buckets_) n += b.flat.numel();
  return n;
}

}  // namespace mantissa

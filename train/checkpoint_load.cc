// load_checkpoint (the seal, then every group, attribute, dtype and shape, then the file's own consistency)
// and check_compatible (a loaded checkpoint against the run's model and optimizer).
#include <algorithm>
#include <hdf5.h>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "optim/low_precision.h"
#include "train/checkpoint.h"
#include "train/checkpoint_file.h"
#include "train/checkpoint_h5.h"

namespace mantissa {
namespace {

using h5::Obj;
using h5::Reader;

absl::StatusOr<std::vector<NamedTensor>> read_tensors(const Reader& r, const Obj& root, const char* name) {
  CK_ASSIGN_OR_RETURN(const Obj g, r.group(root, name));
  CK_ASSIGN_OR_RETURN(const std::vector<std::string> names, r.members(g));
  std::vector<NamedTensor> out;
  for (const std::string& n : names) {
    CK_ASSIGN_OR_RETURN(Tensor t, r.tensor(g, n));
    out.push_back({n, std::move(t)});
  }
  return out;
}

// Every dataset below `g`, named by its path below /fp8, depth first in creation order.
absl::Status read_fp8_tensors(const Reader& r, const Obj& g, const std::string& prefix, int depth,
                              std::vector<NamedTensor>& out) {
  if (depth > 8) return r.error(g.path, "nests groups deeper than 8");
  CK_ASSIGN_OR_RETURN(const std::vector<std::string> names, r.members(g));
  for (const std::string& n : names) {
    if (r.is_group(g, n)) {
      CK_ASSIGN_OR_RETURN(const Obj child, r.group(g, n));
      CK_RETURN_IF_ERROR(read_fp8_tensors(r, child, prefix + n + "/", depth + 1, out));
    } else {
      CK_ASSIGN_OR_RETURN(Tensor t, r.tensor(g, n));
      out.push_back({prefix + n, std::move(t)});
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<OptimizerState> read_optimizer(const Reader& r, const Obj& root) {
  OptimizerState o;
  CK_ASSIGN_OR_RETURN(const Obj opt, r.group(root, "optimizer"));
  CK_ASSIGN_OR_RETURN(o.optimizer, r.attr_string(opt, "type"));
  if (r.has_attr(opt, "precision_ladder")) {  // files written before the ladder have none: the default
    CK_ASSIGN_OR_RETURN(o.ladder, r.attr_string(opt, "precision_ladder"));
    if (!parse_precision_ladder(o.ladder))
      return r.error(opt.path,
                     absl::StrCat("has precision_ladder '", o.ladder,
                                  "', which is not a ladder (e.g. 'master_weights=fp32 optimizer_state=fp32')"));
  }
  CK_ASSIGN_OR_RETURN(const Obj groups, r.group(opt, "groups"));
  CK_ASSIGN_OR_RETURN(const std::vector<std::string> names, r.members(groups));
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string n = std::to_string(i);
    if (std::find(names.begin(), names.end(), n) == names.end())
      return r.error(groups.path, absl::StrCat("has ", names.size(), " members but no group '", n, "'"));
    CK_ASSIGN_OR_RETURN(const Obj g, r.group(groups, n));
    ParamGroupState group;
    CK_ASSIGN_OR_RETURN(group.params, r.strings(g, "params"));
    CK_ASSIGN_OR_RETURN(const std::vector<std::string> hyper, r.attr_names(g));
    for (const std::string& h : hyper) {
      CK_ASSIGN_OR_RETURN(group.hyperparameters[h], r.attr_f64(g, h));
    }
    o.groups.push_back(std::move(group));
  }
  CK_ASSIGN_OR_RETURN(const Obj state, r.group(opt, "state"));
  CK_ASSIGN_OR_RETURN(const std::vector<std::string> params, r.members(state));
  for (const std::string& p : params) {
    CK_ASSIGN_OR_RETURN(const Obj g, r.group(state, p));
    CK_ASSIGN_OR_RETURN(const std::vector<std::string> entries, r.members(g));
    for (const std::string& e : entries) {
      CK_ASSIGN_OR_RETURN(o.tensors[p + "/" + e], r.tensor(g, e));
    }
  }
  return o;
}

absl::StatusOr<TrainerProgress> read_trainer(const Reader& r, const Obj& root) {
  TrainerProgress t;
  CK_ASSIGN_OR_RETURN(const Obj g, r.group(root, "trainer"));
  const std::pair<const char*, int64_t*> fields[] = {{"step", &t.step}, {"epoch", &t.epoch}, {"batch", &t.batch}};
  for (const auto& [name, field] : fields) {
    CK_ASSIGN_OR_RETURN(*field, r.attr_i64(g, name));
    if (*field < 0) return r.error(g.path, absl::StrCat("attribute '", name, "' is ", *field, ", expected >= 0"));
  }
  // The global batch's make-up: all three attributes, or none in files written before they were recorded.
  const char* const batch_names[] = {"world_size", "batch_size", "grad_accum"};
  int present = 0;
  for (const char* name : batch_names) present += r.has_attr(g, name) ? 1 : 0;
  if (present > 0) {
    GlobalBatch b;
    int64_t* const batch_fields[] = {&b.world_size, &b.batch_size, &b.grad_accum};
    for (size_t i = 0; i < 3; ++i) {
      // A file with some of them lacks the others: the reader's error names the first one missing.
      CK_ASSIGN_OR_RETURN(*batch_fields[i], r.attr_i64(g, batch_names[i]));
      if (*batch_fields[i] < 1) {
        return r.error(g.path,
                       absl::StrCat("attribute '", batch_names[i], "' is ", *batch_fields[i], ", expected >= 1"));
      }
    }
    int64_t product = 0;
    if (__builtin_mul_overflow(b.world_size, b.batch_size, &product) ||
        __builtin_mul_overflow(product, b.grad_accum, &product) ||
        __builtin_mul_overflow(product, std::max<int64_t>(t.batch, 1), &product)) {
      return r.error(g.path, absl::StrCat("global batch ", b.world_size, " x ", b.batch_size, " x ", b.grad_accum,
                                          " at batch ", t.batch, " overflows 64 bits"));
    }
    t.global_batch = b;
  }
  CK_ASSIGN_OR_RETURN(const Obj gens, r.group(g, "generators"));
  CK_ASSIGN_OR_RETURN(const std::vector<std::string> names, r.members(gens));
  for (const std::string& n : names) {
    CK_ASSIGN_OR_RETURN(const Obj gen, r.group(gens, n));
    GeneratorState s;
    CK_ASSIGN_OR_RETURN(s.seed, r.attr_u64(gen, "seed"));
    CK_ASSIGN_OR_RETURN(s.counter, r.attr_u64(gen, "counter"));
    CK_ASSIGN_OR_RETURN(const uint64_t index, r.attr_u64(gen, "index"));
    // index 4: the current block is used up; below 4 a block must have been drawn (counter >= 1).
    if (index > 4 || (index < 4 && s.counter == 0))
      return r.error(gen.path, absl::StrCat("has index ", index, " with counter ", s.counter,
                                            "; expected index 4, or 0..3 with counter >= 1"));
    s.index = static_cast<uint32_t>(index);
    t.generators[n] = s;
  }
  return t;
}

absl::StatusOr<CheckpointMeta> read_meta(const Reader& r, const Obj& root) {
  CheckpointMeta m;
  CK_ASSIGN_OR_RETURN(const Obj g, r.group(root, "meta"));
  CK_ASSIGN_OR_RETURN(m.format_version, r.attr_i64(g, "format_version"));
  if (m.format_version > kCheckpointFormatVersion) {
    const absl::StatusOr<std::string> by = r.attr_string(g, "library_version");
    return absl::FailedPreconditionError(absl::StrCat(
        r.file(), ": format version ", m.format_version, " is newer than this library's ", kCheckpointFormatVersion,
        by.ok() ? " (written by mantissa " + *by + ")" : "", ". HINT: read it with a newer mantissa"));
  }
  if (m.format_version < 1) return r.error(g.path, absl::StrCat("has format_version ", m.format_version));
  CK_ASSIGN_OR_RETURN(m.library_version, r.attr_string(g, "library_version"));
  CK_ASSIGN_OR_RETURN(m.precision, r.attr_string(g, "precision"));
  CK_ASSIGN_OR_RETURN(m.config_json, r.attr_string(g, "config_json"));
  CK_ASSIGN_OR_RETURN(m.created, r.attr_string(g, "created"));
  if (r.has_attr(g, "wall_s")) {  // files written before it have none
    CK_ASSIGN_OR_RETURN(m.wall_s, r.attr_f64(g, "wall_s"));
  }
  return m;
}

// Shapes and names that must agree within one file.
absl::Status check_consistent(const Reader& r, const Checkpoint& c) {
  std::map<std::string, const Tensor*> model;
  for (const NamedTensor& p : c.model) model[p.name] = &p.tensor;
  std::set<std::string> optimized;
  for (size_t g = 0; g < c.optimizer.groups.size(); ++g)
    for (const std::string& p : c.optimizer.groups[g].params) {
      const std::string where = absl::StrCat("/optimizer/groups/", g, "/params");
      if (!model.count(p)) return r.error(where, "names '" + p + "', which is not in /model");
      if (!optimized.insert(p).second) return r.error(where, "names '" + p + "' a second time");
    }
  for (const auto& [key, t] : c.optimizer.tensors) {
    const size_t slash = key.find('/');
    const std::string p = key.substr(0, slash), what = key.substr(slash + 1);
    if (!optimized.count(p)) return r.error("/optimizer/state/" + p, "is not a parameter of any group");
    const Tensor& param = *model.at(p);
    if (what.ends_with(".absmax")) {  // 8-bit state: one absmax per block of the parameter (optim/precision_ladder.h)
      const int64_t blocks = (param.numel() + low_precision::kQuantBlock - 1) / low_precision::kQuantBlock;
      if (t.shape() != Shape{blocks})
        return r.error("/optimizer/state/" + key,
                       absl::StrCat("has shape ", shape_str(t.shape()), ", expected [", blocks, "] (one per ",
                                    low_precision::kQuantBlock, " of /model/", p, "'s ", param.numel(), " values)"));
    } else if (what != "step" && t.shape() != param.shape()) {
      return r.error("/optimizer/state/" + key, absl::StrCat("has shape ", shape_str(t.shape()), ", /model/", p,
                                                             " has ", shape_str(param.shape())));
    }
  }
  if (c.schedule && c.schedule->base_lrs.size() != c.optimizer.groups.size())
    return r.error("/schedule/base_lrs", absl::StrCat("has ", c.schedule->base_lrs.size(), " values for ",
                                                      c.optimizer.groups.size(), " param groups"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Checkpoint> load_checkpoint(const std::string& path) {
  CK_ASSIGN_OR_RETURN(const uint64_t size, checkpoint_file::verify(path));
  h5::QuietErrors quiet;
  h5::Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) return absl::DataLossError(absl::StrCat(path, ": HDF5 cannot open it: ", h5::last_error()));
  const Reader r(path, size);
  const Obj root{h5::Id(H5Gopen2(file.get(), "/", H5P_DEFAULT), H5Gclose), "/"};
  if (!root.id.valid()) return r.error("/", "cannot be opened");
  Checkpoint c;
  CK_ASSIGN_OR_RETURN(c.meta, read_meta(r, root));  // first: a newer version is the error to report
  CK_ASSIGN_OR_RETURN(c.model, read_tensors(r, root, "model"));
  CK_ASSIGN_OR_RETURN(c.buffers, read_tensors(r, root, "buffers"));
  CK_ASSIGN_OR_RETURN(c.optimizer, read_optimizer(r, root));
  if (r.has(root, "schedule")) {
    CK_ASSIGN_OR_RETURN(const Obj s, r.group(root, "schedule"));
    LRSchedulerState state;
    CK_ASSIGN_OR_RETURN(state.step, r.attr_i64(s, "step"));
    CK_ASSIGN_OR_RETURN(state.base_lrs, r.f64s(s, "base_lrs"));
    c.schedule = std::move(state);
  }
  {
    CK_ASSIGN_OR_RETURN(const Obj s, r.group(root, "scaler"));
    CK_ASSIGN_OR_RETURN(const std::vector<std::string> names, r.attr_names(s));
    for (const std::string& n : names) {
      CK_ASSIGN_OR_RETURN(c.scaler[n], r.attr_f64(s, n));
    }
  }
  if (r.has(root, "fp8")) {  // runs without FP8 have none
    CK_ASSIGN_OR_RETURN(const Obj g, r.group(root, "fp8"));
    CK_ASSIGN_OR_RETURN(c.fp8.recipe, r.attr_string(g, "recipe"));
    CK_RETURN_IF_ERROR(read_fp8_tensors(r, g, "", 0, c.fp8.tensors));
  }
  CK_ASSIGN_OR_RETURN(c.trainer, read_trainer(r, root));
  {
    CK_ASSIGN_OR_RETURN(const Obj d, r.group(root, "data"));
    CK_ASSIGN_OR_RETURN(const std::vector<std::string> names, r.members(d));
    for (const std::string& n : names) {
      CK_ASSIGN_OR_RETURN(c.data[n], r.text(d, n));
    }
  }
  const absl::Status consistent = check_consistent(r, c);
  if (!consistent.ok()) return consistent;
  return c;
}

namespace {

absl::Status compare_tensors(const std::string& path, const char* group, const char* what,
                             const std::vector<NamedTensor>& saved, const std::vector<NamedTensor>& expected) {
  std::map<std::string, const Tensor*> in_file;
  for (const NamedTensor& t : saved) in_file[t.name] = &t.tensor;
  std::set<std::string> names;
  for (const NamedTensor& e : expected) {
    names.insert(e.name);
    const std::string obj = absl::StrCat("/", group, "/", e.name);
    auto it = in_file.find(e.name);
    if (it == in_file.end())
      return absl::FailedPreconditionError(absl::StrCat(path, ": ", "/", group, " has no '", e.name, "', a ", what,
                                                        " of the model. HINT: is this a checkpoint of another model?"));
    const Tensor& t = *it->second;
    if (t.shape() != e.tensor.shape())
      return absl::FailedPreconditionError(absl::StrCat(path, ": ", obj, " has shape ", shape_str(t.shape()),
                                                        ", the model expects ", shape_str(e.tensor.shape())));
    if (t.dtype() != e.tensor.dtype())
      return absl::FailedPreconditionError(absl::StrCat(path, ": ", obj, " is ", std::string(dtype_name(t.dtype())),
                                                        ", the model expects ",
                                                        std::string(dtype_name(e.tensor.dtype()))));
  }
  for (const NamedTensor& t : saved)
    if (!names.count(t.name))
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": /", group, "/", t.name, " is not a ", what, " of the model"));
  return absl::OkStatus();
}

}  // namespace

absl::Status check_compatible(const std::string& path, const Checkpoint& checkpoint, const Module& model,
                              const Optimizer& optimizer) {
  // The ladder first: another ladder's weights have another dtype, which it explains.
  const std::string ladder =
      checkpoint.optimizer.ladder.empty() ? PrecisionLadder{}.str() : checkpoint.optimizer.ladder;
  if (ladder != optimizer.precision_ladder().str())
    return absl::FailedPreconditionError(absl::StrCat(path, ": written under the precision ladder ", ladder,
                                                      "; the run's optimizer has ", optimizer.precision_ladder().str(),
                                                      ". HINT: resume with the flags that wrote it"));
  absl::Status s = compare_tensors(path, "model", "parameter", checkpoint.model, model.named_parameters());
  if (s.ok()) s = compare_tensors(path, "buffers", "buffer", checkpoint.buffers, model.named_buffers());
  if (!s.ok()) return s;
  const OptimizerState& o = checkpoint.optimizer;
  if (o.optimizer != optimizer.type_name())
    return absl::FailedPreconditionError(absl::StrCat(path, ": /optimizer holds the state of a '", o.optimizer,
                                                      "' optimizer, the run uses '", optimizer.type_name(), "'"));
  if (o.groups.size() != optimizer.num_param_groups())
    return absl::FailedPreconditionError(absl::StrCat(path, ": /optimizer has ", o.groups.size(),
                                                      " param groups, the run's optimizer has ",
                                                      optimizer.num_param_groups()));
  // The run's hyperparameter names (state_dict copies the state too: this runs once, at resume).
  const OptimizerState current = optimizer.state_dict();
  for (size_t g = 0; g < o.groups.size(); ++g) {
    const std::string group = absl::StrCat(path, ": /optimizer/groups/", g);
    std::vector<std::string> names;
    for (const NamedTensor& p : optimizer.group_params(g)) names.push_back(p.name);
    if (names != o.groups[g].params)
      return absl::FailedPreconditionError(
          absl::StrCat(group, " has parameters [", absl::StrJoin(o.groups[g].params, ", "),
                       "], the run's optimizer has [", absl::StrJoin(names, ", "), "]"));
    for (const auto& [name, value] : current.groups[g].hyperparameters)
      if (!o.groups[g].hyperparameters.count(name))
        return absl::FailedPreconditionError(absl::StrCat(group, " has no attribute '", name, "'"));
    for (const auto& [name, value] : o.groups[g].hyperparameters)
      if (!current.groups[g].hyperparameters.count(name))
        return absl::FailedPreconditionError(
            absl::StrCat(group, " has attribute '", name, "', which ", optimizer.type_name(), " does not know"));
  }
  return absl::OkStatus();
}

}  // namespace mantissa

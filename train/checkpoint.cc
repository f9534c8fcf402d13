// Checkpoint <-> HDF5 file (the layout in checkpoint.h), compatibility with a model and optimizer, and the
// checkpoint folder with its `latest` pointer.
#include "train/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <hdf5.h>
#include <map>
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "train/checkpoint_file.h"
#include "train/checkpoint_h5.h"

#ifndef MANTISSA_VERSION
#define MANTISSA_VERSION "0.1.0"  // CMake passes the project version; this is the fallback
#endif

namespace mantissa {
namespace {

namespace fs = std::filesystem;
using h5::Obj;

std::string now_iso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A name usable as one HDF5 link name (dots are fine, a slash would make a path).
absl::Status check_name(const std::string& path, const std::string& where, const std::string& name) {
  if (name.empty() || name == "." || name.find('/') != std::string::npos || name.find('\0') != std::string::npos)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot store '", name, "' under ", where, ": a name must be non-empty, without '/'"));
  return absl::OkStatus();
}

absl::Status write_tensors(const h5::Writer& w, const Obj& root, const std::string& path, const char* group,
                           const std::vector<NamedTensor>& tensors) {
  CK_ASSIGN_OR_RETURN(Obj g, w.group(root, group, /*ordered=*/true));
  for (const NamedTensor& t : tensors) {
    CK_RETURN_IF_ERROR(check_name(path, g.path, t.name));
    CK_RETURN_IF_ERROR(w.tensor(g, t.name, t.tensor));
  }
  return absl::OkStatus();
}

absl::Status write_optimizer(const h5::Writer& w, const Obj& root, const std::string& path, const OptimizerState& o) {
  CK_ASSIGN_OR_RETURN(Obj opt, w.group(root, "optimizer"));
  CK_RETURN_IF_ERROR(w.attr_string(opt, "type", o.optimizer));
  if (!o.ladder.empty()) CK_RETURN_IF_ERROR(w.attr_string(opt, "precision_ladder", o.ladder));
  CK_ASSIGN_OR_RETURN(Obj groups, w.group(opt, "groups", /*ordered=*/true));
  for (size_t i = 0; i < o.groups.size(); ++i) {
    CK_ASSIGN_OR_RETURN(Obj g, w.group(groups, std::to_string(i)));
    CK_RETURN_IF_ERROR(w.strings(g, "params", o.groups[i].params));
    for (const auto& [name, value] : o.groups[i].hyperparameters) CK_RETURN_IF_ERROR(w.attr_f64(g, name, value));
  }
  CK_ASSIGN_OR_RETURN(Obj state, w.group(opt, "state", /*ordered=*/true));
  std::optional<Obj> param;  // the tensors map is sorted: one parameter's entries are consecutive
  for (const auto& [key, t] : o.tensors) {
    const size_t slash = key.find('/');
    if (slash == std::string::npos)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": optimizer state entry '", key, "' is not '<param name>/<state name>'"));
    const std::string name = key.substr(0, slash), what = key.substr(slash + 1);
    CK_RETURN_IF_ERROR(check_name(path, state.path, name));
    CK_RETURN_IF_ERROR(check_name(path, state.child(name), what));
    if (!param || param->path != state.child(name)) {
      param.reset();
      CK_ASSIGN_OR_RETURN(param, w.group(state, name));
    }
    CK_RETURN_IF_ERROR(w.tensor(*param, what, t));
  }
  return absl::OkStatus();
}

// /fp8: each name is a path of groups ending in a dataset; groups are made once, in first-seen order.
absl::Status write_fp8(const h5::Writer& w, const Obj& root, const std::string& path, const Fp8CheckpointState& s) {
  CK_ASSIGN_OR_RETURN(Obj fp8, w.group(root, "fp8", /*ordered=*/true));
  CK_RETURN_IF_ERROR(w.attr_string(fp8, "recipe", s.recipe));
  std::map<std::string, Obj> groups;  // by path below /fp8
  for (const NamedTensor& t : s.tensors) {
    const Obj* parent = &fp8;
    std::string prefix;
    size_t begin = 0;
    for (size_t slash = t.name.find('/'); slash != std::string::npos; slash = t.name.find('/', begin)) {
      const std::string part = t.name.substr(begin, slash - begin);
      CK_RETURN_IF_ERROR(check_name(path, parent->path, part));
      prefix += "/" + part;
      auto it = groups.find(prefix);
      if (it == groups.end()) {
        CK_ASSIGN_OR_RETURN(Obj g, w.group(*parent, part, /*ordered=*/true));
        it = groups.emplace(prefix, std::move(g)).first;
      }
      parent = &it->second;
      begin = slash + 1;
    }
    const std::string leaf = t.name.substr(begin);
    CK_RETURN_IF_ERROR(check_name(path, parent->path, leaf));
    CK_RETURN_IF_ERROR(w.tensor(*parent, leaf, t.tensor));
  }
  return absl::OkStatus();
}

absl::Status write_layout(const h5::Writer& w, const Obj& root, const std::string& path, const Checkpoint& c) {
  CK_RETURN_IF_ERROR(write_tensors(w, root, path, "model", c.model));
  CK_RETURN_IF_ERROR(write_tensors(w, root, path, "buffers", c.buffers));
  CK_RETURN_IF_ERROR(write_optimizer(w, root, path, c.optimizer));
  if (c.schedule) {
    CK_ASSIGN_OR_RETURN(Obj s, w.group(root, "schedule"));
    CK_RETURN_IF_ERROR(w.attr_i64(s, "step", c.schedule->step));
    CK_RETURN_IF_ERROR(w.f64s(s, "base_lrs", c.schedule->base_lrs));
  }
  {
    CK_ASSIGN_OR_RETURN(Obj s, w.group(root, "scaler"));
    for (const auto& [name, value] : c.scaler) CK_RETURN_IF_ERROR(w.attr_f64(s, name, value));
  }
  if (!c.fp8.empty()) CK_RETURN_IF_ERROR(write_fp8(w, root, path, c.fp8));
  {
    CK_ASSIGN_OR_RETURN(Obj t, w.group(root, "trainer"));
    CK_RETURN_IF_ERROR(w.attr_i64(t, "step", c.trainer.step));
    CK_RETURN_IF_ERROR(w.attr_i64(t, "epoch", c.trainer.epoch));
    CK_RETURN_IF_ERROR(w.attr_i64(t, "batch", c.trainer.batch));
    if (const std::optional<GlobalBatch>& g = c.trainer.global_batch) {
      if (g->world_size < 1 || g->batch_size < 1 || g->grad_accum < 1) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": the global batch ", g->world_size, " ranks x ",
                                                       g->batch_size, " per rank x grad_accum ", g->grad_accum,
                                                       " has a factor below 1"));
      }
      CK_RETURN_IF_ERROR(w.attr_i64(t, "world_size", g->world_size));
      CK_RETURN_IF_ERROR(w.attr_i64(t, "batch_size", g->batch_size));
      CK_RETURN_IF_ERROR(w.attr_i64(t, "grad_accum", g->grad_accum));
    }
    CK_ASSIGN_OR_RETURN(Obj gens, w.group(t, "generators"));
    for (const auto& [name, s] : c.trainer.generators) {
      CK_RETURN_IF_ERROR(check_name(path, gens.path, name));
      CK_ASSIGN_OR_RETURN(Obj g, w.group(gens, name));
      CK_RETURN_IF_ERROR(w.attr_u64(g, "seed", s.seed));
      CK_RETURN_IF_ERROR(w.attr_u64(g, "counter", s.counter));
      CK_RETURN_IF_ERROR(w.attr_u32(g, "index", s.index));
    }
  }
  {
    CK_ASSIGN_OR_RETURN(Obj d, w.group(root, "data"));
    for (const auto& [name, text] : c.data) {
      CK_RETURN_IF_ERROR(check_name(path, d.path, name));
      CK_RETURN_IF_ERROR(w.text(d, name, text));
    }
  }
  CK_ASSIGN_OR_RETURN(Obj m, w.group(root, "meta"));
  CK_RETURN_IF_ERROR(w.attr_i64(m, "format_version", c.meta.format_version));
  CK_RETURN_IF_ERROR(
      w.attr_string(m, "library_version", c.meta.library_version.empty() ? MANTISSA_VERSION : c.meta.library_version));
  CK_RETURN_IF_ERROR(w.attr_string(m, "precision", c.meta.precision));
  CK_RETURN_IF_ERROR(w.attr_string(m, "config_json", c.meta.config_json));
  CK_RETURN_IF_ERROR(w.attr_string(m, "created", c.meta.created.empty() ? now_iso8601() : c.meta.created));
  CK_RETURN_IF_ERROR(w.attr_f64(m, "wall_s", c.meta.wall_s));
  return absl::OkStatus();
}

// Writes the whole file at `tmp` (messages name `path`) and seals it.
absl::Status write_file(const std::string& tmp, const std::string& path, const Checkpoint& c) {
  h5::QuietErrors quiet;
  h5::Id fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose), fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  // The user block holds the seal; 1.8 object headers allow attributes over 64 KiB (a long config).
  if (!fcpl.valid() || !fapl.valid() || H5Pset_userblock(fcpl.get(), checkpoint_file::kHeaderBytes) < 0 ||
      H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0 ||
      H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_SEMI) < 0)
    return absl::InternalError(path + ": cannot set up HDF5 file properties: " + h5::last_error());
  h5::Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose);
  if (!file.valid()) return h5::write_error(absl::StrCat(path, ": cannot create its temporary file ", tmp));
  {
    const h5::Writer w(path);
    const Obj root{h5::Id(H5Gopen2(file.get(), "/", H5P_DEFAULT), H5Gclose), "/"};
    CK_RETURN_IF_ERROR(write_layout(w, root, path, c));
  }
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0 || !file.reset())
    return h5::write_error(path + ": cannot finish writing it");
  return checkpoint_file::seal(tmp);
}

}  // namespace

absl::Status save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  return checkpoint_file::write_atomically(path,
                                           [&](const std::string& tmp) { return write_file(tmp, path, checkpoint); });
}

absl::Status reseal_checkpoint(const std::string& path) {
  {
    h5::QuietErrors quiet;
    h5::Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file.valid()) return absl::InvalidArgumentError(path + ": not a readable HDF5 file");
    h5::Id fcpl(H5Fget_create_plist(file.get()), H5Pclose);
    hsize_t userblock = 0;
    if (!fcpl.valid() || H5Pget_userblock(fcpl.get(), &userblock) < 0 || userblock != checkpoint_file::kHeaderBytes)
      return absl::InvalidArgumentError(absl::StrCat(path, ": its HDF5 user block is ", userblock, " bytes, not ",
                                                     checkpoint_file::kHeaderBytes, ": not a mantissa checkpoint"));
  }
  CK_RETURN_IF_ERROR(checkpoint_file::seal(path));
  return absl::OkStatus();
}

// load_checkpoint and check_compatible: train/checkpoint_load.cc. CheckpointDir: below.

namespace {

// step_<n>.h5 -> n; nullopt for any other name.
std::optional<int64_t> step_of(const std::string& name) {
  constexpr std::string_view prefix = "step_", suffix = ".h5";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  int64_t step = 0;
  const char* begin = name.data() + prefix.size();
  const char* end = name.data() + name.size() - suffix.size();
  const auto r = std::from_chars(begin, end, step);
  if (r.ec != std::errc() || r.ptr != end || step < 0) return std::nullopt;
  return step;
}

// Temporary files left by a writer that died (.<name>.tmp.<pid> whose pid is gone).
void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (name.empty() || name[0] != '.' || at == std::string::npos) continue;
    int pid = 0;
    const auto r = std::from_chars(name.data() + at + 5, name.data() + name.size(), pid);
    if (r.ec != std::errc() || r.ptr != name.data() + name.size() || pid <= 0) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) fs::remove(entry.path(), ec);
  }
}

std::string megabytes(uint64_t bytes) { return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20)); }

// " (1.4 MiB free in runs/a)", or "" when the file system cannot say.
std::string free_space_note(const std::string& dir) {
  std::error_code ec;
  const fs::space_info space = fs::space(dir, ec);
  if (ec || space.available == static_cast<std::uintmax_t>(-1)) return "";
  return absl::StrCat(" (", megabytes(space.available), " free in ", dir, ")");
}

// After a failed write: what `latest` names, checked rather than assumed.
std::string what_is_kept(const CheckpointDir& dir) {
  const std::string latest = (fs::path(dir.dir()) / "latest").string();
  const absl::StatusOr<std::string> previous = dir.latest();
  if (!previous.ok()) return absl::StrCat("No earlier checkpoint is in ", dir.dir(), ", and no partial file is left");
  const absl::StatusOr<uint64_t> size = checkpoint_file::verify(*previous);
  if (!size.ok())
    return absl::StrCat("No partial file is left, but the checkpoint ", latest,
                        " names does not verify either: ", size.status().message());
  return absl::StrCat("Nothing is lost: ", latest, " still names ", fs::path(*previous).filename().string(),
                      ", which is intact (", megabytes(*size), ", checksum verified), and no partial file is left");
}

}  // namespace

CheckpointDir::CheckpointDir(std::string dir, int64_t keep) : dir_(std::move(dir)), keep_(keep) {}

absl::StatusOr<std::string> CheckpointDir::write(const Checkpoint& checkpoint) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir_, ": cannot create the checkpoint folder: ", ec.message()));
  remove_stale_temporaries(dir_);
  const std::string name = absl::StrCat("step_", checkpoint.trainer.step, ".h5");
  const std::string path = (fs::path(dir_) / name).string();
  if (absl::Status st = save_checkpoint(path, checkpoint); !st.ok()) {
    // The user's question is "what did I lose?": answer it, after the reason in plain words.
    std::string reason(st.message());
    if (const size_t cause = reason.rfind(": "); absl::IsResourceExhausted(st) && cause != std::string::npos) {
      // os_error's "<file>: <HDF5 object>: <strerror>": keep the OS's words, drop the HDF5 object path.
      reason = reason.substr(cause + 2);
      if (!reason.empty()) reason[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(reason[0])));
      reason = absl::StrCat("cannot write the checkpoint ", path, ": ", reason, free_space_note(dir_));
    }
    return absl::Status(st.code(), absl::StrCat(reason, ". ", what_is_kept(*this)));
  }
  const std::string latest = (fs::path(dir_) / "latest").string();
  if (absl::Status st = checkpoint_file::write_atomically(
          latest, [&](const std::string& tmp) { return checkpoint_file::write_text(tmp, name + "\n"); });
      !st.ok()) {
    return absl::Status(st.code(),
                        absl::StrCat(st.message(), free_space_note(dir_), ". ", path, " is written and complete, but ",
                                     latest, " was left as it was: resume from ", name, " by its path"));
  }
  // Keep the file just written and the newest keep - 1 others (by step number; keep <= 0 keeps all).
  if (keep_ > 0) {
    std::vector<std::pair<int64_t, fs::path>> others;
    for (const auto& entry : fs::directory_iterator(dir_, ec)) {
      const std::string n = entry.path().filename().string();
      const std::optional<int64_t> step = step_of(n);
      if (step && n != name) others.emplace_back(*step, entry.path());
    }
    std::sort(others.begin(), others.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t i = static_cast<size_t>(keep_ - 1); i < others.size(); ++i) {
      fs::remove(others[i].second, ec);
      if (ec) return absl::InternalError(absl::StrCat(others[i].second.string(), ": cannot remove: ", ec.message()));
    }
  }
  return path;
}

absl::StatusOr<std::string> CheckpointDir::latest() const {
  const std::string latest = (fs::path(dir_) / "latest").string();
  std::ifstream in(latest, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(latest, ": no such file (no checkpoint written in ", dir_, " yet)"));
  std::string name;
  std::getline(in, name, '\n');
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();  // "\r"
  if (name.empty() || name.size() > 4096 || name.find('/') != std::string::npos || name == "." || name == "..")
    return absl::DataLossError(absl::StrCat(latest, ": does not name a checkpoint file: '", name.substr(0, 80), "'"));
  const std::string path = (fs::path(dir_) / name).string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return absl::NotFoundError(absl::StrCat(latest, ": names ", name, ", which does not exist in ", dir_));
  return path;
}

absl::StatusOr<std::string> resolve_resume(const std::string& resume, const std::string& checkpoint_dir) {
  if (resume == "latest") {
    if (checkpoint_dir.empty())
      return absl::InvalidArgumentError("--resume=latest needs a checkpoint folder (--checkpoint_dir)");
    return CheckpointDir(checkpoint_dir).latest();
  }
  if (resume.empty()) return absl::InvalidArgumentError("--resume: empty path");
  std::error_code ec;
  if (!fs::exists(resume, ec)) return absl::NotFoundError(resume + ": no such file");
  return resume;
}

}  // namespace mantissa

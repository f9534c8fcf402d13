#include "tests/support/golden.h"

#include <algorithm>
#include <cstdlib>
#include <hdf5.h>
#include <stdexcept>

namespace mantissa::testing {
namespace {

[[noreturn]] void fail(const std::string& file, const std::string& path, const std::string& what) {
  throw std::runtime_error("golden file " + file + ": " + path + ": " + what);
}

struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Handle() {
    if (id >= 0) close(id);
  }
};

template <typename T>
std::vector<T> read_all(hid_t file, const std::string& name, const std::string& path, hid_t mem_type) {
  Handle ds{H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose};
  if (ds.id < 0) fail(name, path, "no such dataset");
  Handle space{H5Dget_space(ds.id), H5Sclose};
  const hssize_t n = H5Sget_simple_extent_npoints(space.id);
  std::vector<T> out(static_cast<size_t>(n));
  if (n > 0 && H5Dread(ds.id, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) {
    fail(name, path, "read failed");
  }
  return out;
}

}  // namespace

// MANTISSA_GOLDEN_DIR in the environment overrides the build's path (a test binary run on another machine).
std::string golden_dir() {
  const char* env = std::getenv("MANTISSA_GOLDEN_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(MANTISSA_GOLDEN_DIR);
}

std::string golden_path(const std::string& file) { return golden_dir() + "/" + file; }

GoldenFile::GoldenFile(const std::string& file) : name_(file) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions here, not stderr noise
  file_ = H5Fopen(golden_path(file).c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) fail(file, "/", "cannot open " + golden_path(file));
}

GoldenFile::~GoldenFile() { H5Fclose(static_cast<hid_t>(file_)); }

bool GoldenFile::has(const std::string& path) const {
  // Check each prefix so a missing intermediate group is not an error.
  size_t pos = 0;
  while ((pos = path.find('/', pos + 1)) != std::string::npos) {
    if (H5Lexists(file_, path.substr(0, pos).c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return H5Lexists(file_, path.c_str(), H5P_DEFAULT) > 0;
}

Shape GoldenFile::shape(const std::string& path) const {
  Handle ds{H5Dopen2(file_, path.c_str(), H5P_DEFAULT), H5Dclose};
  if (ds.id < 0) fail(name_, path, "no such dataset");
  Handle space{H5Dget_space(ds.id), H5Sclose};
  const int nd = H5Sget_simple_extent_ndims(space.id);
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(nd, 0)));
  H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
  return Shape(dims.begin(), dims.end());
}

std::vector<double> GoldenFile::f64(const std::string& p) const {
  return read_all<double>(file_, name_, p, H5T_NATIVE_DOUBLE);
}
std::vector<float> GoldenFile::f32(const std::string& p) const {
  return read_all<float>(file_, name_, p, H5T_NATIVE_FLOAT);
}
std::vector<int64_t> GoldenFile::i64(const std::string& p) const {
  return read_all<int64_t>(file_, name_, p, H5T_NATIVE_INT64);
}
std::vector<uint16_t> GoldenFile::u16(const std::string& p) const {
  return read_all<uint16_t>(file_, name_, p, H5T_NATIVE_UINT16);
}

std::vector<uint8_t> GoldenFile::u8(const std::string& p) const {
  return read_all<uint8_t>(file_, name_, p, H5T_NATIVE_UINT8);
}

std::vector<uint32_t> GoldenFile::u32(const std::string& p) const {
  return read_all<uint32_t>(file_, name_, p, H5T_NATIVE_UINT32);
}

Tensor GoldenFile::tensor(const std::string& path, DType dtype) const {
  const Shape s = shape(path);
  if (dtype == DType::kI64 || dtype == DType::kI32) {
    return from_vector<int64_t>(i64(path), s, {.dtype = dtype});
  }
  return from_vector<double>(f64(path), s, {.dtype = dtype});
}

std::vector<std::string> GoldenFile::members(const std::string& group) const {
  Handle g{H5Gopen2(file_, group.c_str(), H5P_DEFAULT), H5Gclose};
  if (g.id < 0) fail(name_, group, "no such group");
  H5G_info_t info;
  H5Gget_info(g.id, &info);
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(g.id, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    std::string s(static_cast<size_t>(len), '\0');
    H5Lget_name_by_idx(g.id, ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size() + 1, H5P_DEFAULT);
    out.push_back(s);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool GoldenFile::has_attr(const std::string& object, const std::string& name) const {
  return H5Aexists_by_name(file_, object.c_str(), name.c_str(), H5P_DEFAULT) > 0;
}

namespace {
template <typename T>
std::vector<T> read_attr(hid_t file, const std::string& fname, const std::string& object, const std::string& name,
                         hid_t mem_type) {
  Handle a{H5Aopen_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  if (a.id < 0) fail(fname, object, "no attribute '" + name + "'");
  Handle space{H5Aget_space(a.id), H5Sclose};
  const hssize_t n = H5Sget_simple_extent_npoints(space.id);
  std::vector<T> out(static_cast<size_t>(n));
  if (H5Aread(a.id, mem_type, out.data()) < 0) fail(fname, object, "cannot read attribute '" + name + "'");
  return out;
}
}  // namespace

double GoldenFile::attr_f64(const std::string& o, const std::string& n) const {
  return read_attr<double>(file_, name_, o, n, H5T_NATIVE_DOUBLE).at(0);
}
int64_t GoldenFile::attr_i64(const std::string& o, const std::string& n) const {
  return read_attr<int64_t>(file_, name_, o, n, H5T_NATIVE_INT64).at(0);
}
std::vector<int64_t> GoldenFile::attr_i64_vector(const std::string& o, const std::string& n) const {
  return read_attr<int64_t>(file_, name_, o, n, H5T_NATIVE_INT64);
}

std::vector<double> GoldenFile::attr_f64_vector(const std::string& o, const std::string& n) const {
  return read_attr<double>(file_, name_, o, n, H5T_NATIVE_DOUBLE);
}

std::string GoldenFile::attr_str(const std::string& object, const std::string& name) const {
  Handle a{H5Aopen_by_name(file_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  if (a.id < 0) fail(name_, object, "no attribute '" + name + "'");
  Handle type{H5Aget_type(a.id), H5Tclose};
  if (H5Tis_variable_str(type.id) > 0) {
    char* s = nullptr;
    Handle mem{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(mem.id, H5T_VARIABLE);
    H5Tset_cset(mem.id, H5T_CSET_UTF8);
    if (H5Aread(a.id, mem.id, &s) < 0) fail(name_, object, "cannot read attribute '" + name + "'");
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  const size_t size = H5Tget_size(type.id);
  std::string out(size, '\0');
  H5Aread(a.id, type.id, out.data());
  out.resize(out.find('\0') == std::string::npos ? size : out.find('\0'));
  return out;
}

}  // namespace mantissa::testing

// Checked HDF5 writing and reading for checkpoints: every H5 return code is looked at, every size read
// from the file is bounded by the file's size before anything is allocated.
#include "train/checkpoint_h5.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "train/checkpoint_file.h"

namespace mantissa::h5 {
namespace {

constexpr int kMaxRank = 32;               // H5S_MAX_RANK
constexpr hsize_t kMaxMembers = 1 << 20;   // links or attributes of one object
constexpr size_t kMaxNameBytes = 1 << 16;  // a link or attribute name

Id space_id(hid_t id) { return Id(id, H5Sclose); }
Id type_id(hid_t id) { return Id(id, H5Tclose); }
Id attr_id(hid_t id) { return Id(id, H5Aclose); }
Id dataset_id(hid_t id) { return Id(id, H5Dclose); }
Id plist_id(hid_t id) { return Id(id, H5Pclose); }

herr_t innermost(unsigned n, const H5E_error2_t* e, void* out) {
  if (n == 0 && e != nullptr && e->desc != nullptr) *static_cast<std::string*>(out) = e->desc;
  return 0;
}

std::string with_detail(const std::string& what) {
  const std::string d = last_error();
  return d.empty() ? what : absl::StrCat(what, " (HDF5: ", d, ")");
}

// A fixed-length string type of `size` bytes, NUL-padded, UTF-8.
Id fixed_string_type(size_t size) {
  Id t = type_id(H5Tcopy(H5T_C_S1));
  if (!t.valid() || H5Tset_size(t.get(), size) < 0 || H5Tset_strpad(t.get(), H5T_STR_NULLPAD) < 0 ||
      H5Tset_cset(t.get(), H5T_CSET_UTF8) < 0)
    return Id();
  return t;
}

// The file and memory types of a tensor dtype, and the "dtype" attribute for the ones HDF5 lacks.
struct TypeFor {
  hid_t file, mem;
  const char* tag;  // null: HDF5's own type says it
};
TypeFor type_for(DType d) {
  switch (d) {
    case DType::kF32: return {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, nullptr};
    case DType::kF64: return {H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, nullptr};
    case DType::kI64: return {H5T_STD_I64LE, H5T_NATIVE_INT64, nullptr};
    case DType::kI32: return {H5T_STD_I32LE, H5T_NATIVE_INT32, nullptr};
    case DType::kF16: return {H5T_STD_U16LE, H5T_NATIVE_UINT16, "f16"};
    case DType::kBF16: return {H5T_STD_U16LE, H5T_NATIVE_UINT16, "bf16"};
    case DType::kBool: return {H5T_STD_U8LE, H5T_NATIVE_UINT8, "bool"};
    case DType::kU8: return {H5T_STD_U8LE, H5T_NATIVE_UINT8, nullptr};
    case DType::kF8E4M3: return {H5T_STD_U8LE, H5T_NATIVE_UINT8, "f8e4m3"};
    case DType::kF8E5M2: return {H5T_STD_U8LE, H5T_NATIVE_UINT8, "f8e5m2"};
  }
  return {H5T_NATIVE_UINT8, H5T_NATIVE_UINT8, "?"};
}

}  // namespace

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}
QuietErrors::~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

std::string last_error() {
  std::string out;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, &out);
  return out;
}

int last_os_error() {
  const std::string d = last_error();
  constexpr std::string_view key = "errno = ";
  const size_t at = d.find(key);
  if (at == std::string::npos) return 0;
  int err = 0;
  const char* begin = d.data() + at + key.size();
  const auto r = std::from_chars(begin, d.data() + d.size(), err);
  return r.ec == std::errc() && r.ptr != begin && err > 0 ? err : 0;
}

absl::Status write_error(const std::string& what) {
  const int err = last_os_error();
  if (err != 0) return checkpoint_file::os_error(what, err);
  return absl::InternalError(with_detail(what));
}

// ---- Writer ----

absl::Status Writer::fail(const Obj& o, const std::string& name, const std::string& what) const {
  return write_error(absl::StrCat(file_, ": cannot write ", o.child(name), ": ", what));
}

absl::StatusOr<Obj> Writer::group(const Obj& parent, const std::string& name, bool ordered) const {
  Id gcpl = plist_id(H5Pcreate(H5P_GROUP_CREATE));
  if (!gcpl.valid()) return fail(parent, name, "group properties");
  if (ordered && H5Pset_link_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0)
    return fail(parent, name, "creation order");
  Id g(H5Gcreate2(parent.id.get(), name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
  if (!g.valid()) return fail(parent, name, "cannot create the group");
  return Obj{std::move(g), parent.child(name)};
}

absl::Status Writer::attr(const Obj& o, const std::string& name, hid_t file_type, hid_t mem_type, const void* v) const {
  Id space = space_id(H5Screate(H5S_SCALAR));
  Id a = attr_id(H5Acreate2(o.id.get(), name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid() || H5Awrite(a.get(), mem_type, v) < 0) return fail(o, "", "attribute '" + name + "'");
  return absl::OkStatus();
}
absl::Status Writer::attr_i64(const Obj& o, const std::string& name, int64_t v) const {
  return attr(o, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
absl::Status Writer::attr_u64(const Obj& o, const std::string& name, uint64_t v) const {
  return attr(o, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}
absl::Status Writer::attr_u32(const Obj& o, const std::string& name, uint32_t v) const {
  return attr(o, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &v);
}
absl::Status Writer::attr_f64(const Obj& o, const std::string& name, double v) const {
  return attr(o, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}
absl::Status Writer::attr_string(const Obj& o, const std::string& name, const std::string& v) const {
  Id t = fixed_string_type(v.empty() ? 1 : v.size());
  if (!t.valid()) return fail(o, "", "string type for attribute '" + name + "'");
  const std::string padded = v.empty() ? std::string(1, '\0') : v;
  return attr(o, name, t.get(), t.get(), padded.data());
}

absl::Status Writer::tensor(const Obj& o, const std::string& name, const Tensor& t) const {
  if (!t.defined()) return fail(o, name, "the tensor is undefined");
  const Tensor c = t.to(kCPU).contiguous();  // a GPU tensor is copied to the host first
  const TypeFor ty = type_for(c.dtype());
  std::vector<hsize_t> dims(c.shape().begin(), c.shape().end());
  Id space = space_id(c.dim() == 0 ? H5Screate(H5S_SCALAR)
                                   : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  if (!space.valid()) return fail(o, name, "dataspace of shape " + shape_str(c.shape()));
  Id ds = dataset_id(H5Dcreate2(o.id.get(), name.c_str(), ty.file, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!ds.valid()) return fail(o, name, "cannot create the dataset");
  if (c.numel() > 0 && H5Dwrite(ds.get(), ty.mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.data_ptr()) < 0)
    return fail(o, name, "cannot write the data");
  if (ty.tag != nullptr) return attr_string(Obj{std::move(ds), o.child(name)}, "dtype", ty.tag);
  return absl::OkStatus();
}

absl::Status Writer::text(const Obj& o, const std::string& name, const std::string& v) const {
  Id t = fixed_string_type(v.empty() ? 1 : v.size());
  Id space = space_id(H5Screate(H5S_SCALAR));
  Id ds = dataset_id(H5Dcreate2(o.id.get(), name.c_str(), t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  const std::string padded = v.empty() ? std::string(1, '\0') : v;
  if (!ds.valid() || H5Dwrite(ds.get(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, padded.data()) < 0)
    return fail(o, name, "cannot write the text");
  return attr_i64(Obj{std::move(ds), o.child(name)}, "bytes", static_cast<int64_t>(v.size()));
}

absl::Status Writer::strings(const Obj& o, const std::string& name, const std::vector<std::string>& v) const {
  size_t width = 1;
  for (const std::string& x : v) width = std::max(width, x.size());
  std::string packed(v.size() * width, '\0');
  for (size_t i = 0; i < v.size(); ++i) packed.replace(i * width, v[i].size(), v[i]);
  Id t = fixed_string_type(width);
  const hsize_t n = v.size();
  Id space = space_id(H5Screate_simple(1, &n, nullptr));
  Id ds = dataset_id(H5Dcreate2(o.id.get(), name.c_str(), t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!ds.valid() || (n > 0 && H5Dwrite(ds.get(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, packed.data()) < 0))
    return fail(o, name, "cannot write the strings");
  return absl::OkStatus();
}

absl::Status Writer::f64s(const Obj& o, const std::string& name, const std::vector<double>& v) const {
  const hsize_t n = v.size();
  Id space = space_id(H5Screate_simple(1, &n, nullptr));
  Id ds = dataset_id(
      H5Dcreate2(o.id.get(), name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!ds.valid() || (n > 0 && H5Dwrite(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0))
    return fail(o, name, "cannot write the numbers");
  return absl::OkStatus();
}

// ---- Reader ----

absl::Status Reader::error(const std::string& object, const std::string& what) const {
  return absl::DataLossError(absl::StrCat(file_, ": ", object, " ", what));
}

bool Reader::has(const Obj& parent, const std::string& name) const {
  // A hard link only: HDF5 would follow a soft link anywhere and an external one into another file.
  H5L_info_t link;
  return H5Lexists(parent.id.get(), name.c_str(), H5P_DEFAULT) > 0 &&
         H5Lget_info(parent.id.get(), name.c_str(), &link, H5P_DEFAULT) >= 0 && link.type == H5L_TYPE_HARD;
}

bool Reader::has_attr(const Obj& o, const std::string& name) const { return H5Aexists(o.id.get(), name.c_str()) > 0; }

bool Reader::is_group(const Obj& parent, const std::string& name) const {
  if (!has(parent, name)) return false;
  const Id object(H5Oopen(parent.id.get(), name.c_str(), H5P_DEFAULT), H5Oclose);
  return object.valid() && H5Iget_type(object.get()) == H5I_GROUP;
}

absl::StatusOr<Obj> Reader::group(const Obj& parent, const std::string& name) const {
  if (!has(parent, name)) return error(parent.path, "has no group '" + name + "'");
  Id g(H5Gopen2(parent.id.get(), name.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.valid()) return error(parent.child(name), with_detail("is not a readable group"));
  return Obj{std::move(g), parent.child(name)};
}

absl::StatusOr<std::vector<std::string>> Reader::members(const Obj& o) const {
  H5G_info_t info;
  if (H5Gget_info(o.id.get(), &info) < 0) return error(o.path, with_detail("cannot be listed"));
  if (info.nlinks > kMaxMembers || info.nlinks > file_size_) return error(o.path, "has too many members");
  // Creation order when the group tracks it (every group this library writes with an order does).
  std::vector<std::string> out;
  bool ok = false;
  for (H5_index_t idx : {H5_INDEX_CRT_ORDER, H5_INDEX_NAME}) {
    out.clear();
    ok = true;
    for (hsize_t i = 0; i < info.nlinks && ok; ++i) {
      const ssize_t len = H5Lget_name_by_idx(o.id.get(), ".", idx, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      if (len <= 0 || static_cast<size_t>(len) > kMaxNameBytes) {
        ok = false;
        break;
      }
      std::string s(static_cast<size_t>(len) + 1, '\0');
      if (H5Lget_name_by_idx(o.id.get(), ".", idx, H5_ITER_INC, i, s.data(), s.size(), H5P_DEFAULT) != len) ok = false;
      s.resize(static_cast<size_t>(len));
      out.push_back(std::move(s));
    }
    if (ok) break;
  }
  if (!ok) return error(o.path, with_detail("has a member whose name cannot be read"));
  // Only hard links: a soft link could point anywhere in the file, an external one into another file.
  for (const std::string& name : out) {
    H5L_info_t link;
    if (H5Lget_info(o.id.get(), name.c_str(), &link, H5P_DEFAULT) < 0 || link.type != H5L_TYPE_HARD)
      return error(o.child(name), "is a soft or external link, not an object of the checkpoint");
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> Reader::attr_names(const Obj& o) const {
  struct Names {
    std::vector<std::string> v;
    bool too_many = false;
  } names;
  auto cb = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    auto* n = static_cast<Names*>(data);
    if (n->v.size() >= kMaxMembers || std::strlen(name) > kMaxNameBytes) {
      n->too_many = true;
      return 1;  // stop
    }
    n->v.emplace_back(name);
    return 0;
  };
  hsize_t idx = 0;
  if (H5Aiterate2(o.id.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, cb, &names) < 0 || names.too_many)
    return error(o.path, with_detail("has attributes that cannot be listed"));
  return names.v;
}

absl::StatusOr<Id> Reader::open_attr(const Obj& o, const std::string& name, H5T_class_t cls) const {
  if (!has_attr(o, name)) return error(o.path, "has no attribute '" + name + "'");
  Id a = attr_id(H5Aopen(o.id.get(), name.c_str(), H5P_DEFAULT));
  if (!a.valid()) return error(o.path, with_detail("has an unreadable attribute '" + name + "'"));
  Id space = space_id(H5Aget_space(a.get()));
  if (!space.valid() || H5Sget_simple_extent_npoints(space.get()) != 1)
    return error(o.path, "attribute '" + name + "' is not a single value");
  Id type = type_id(H5Aget_type(a.get()));
  if (!type.valid() || H5Tget_class(type.get()) != cls) {
    const char* want = cls == H5T_INTEGER ? "an integer" : cls == H5T_FLOAT ? "a floating-point number" : "a string";
    return error(o.path, "attribute '" + name + "' is not " + want);
  }
  return a;
}

absl::StatusOr<int64_t> Reader::attr_i64(const Obj& o, const std::string& name) const {
  absl::StatusOr<Id> a = open_attr(o, name, H5T_INTEGER);
  if (!a.ok()) return a.status();
  int64_t v = 0;
  if (H5Aread(a->get(), H5T_NATIVE_INT64, &v) < 0) return error(o.path, "attribute '" + name + "' cannot be read");
  return v;
}

absl::StatusOr<uint64_t> Reader::attr_u64(const Obj& o, const std::string& name) const {
  absl::StatusOr<Id> a = open_attr(o, name, H5T_INTEGER);
  if (!a.ok()) return a.status();
  uint64_t v = 0;
  if (H5Aread(a->get(), H5T_NATIVE_UINT64, &v) < 0) return error(o.path, "attribute '" + name + "' cannot be read");
  return v;
}

absl::StatusOr<double> Reader::attr_f64(const Obj& o, const std::string& name) const {
  absl::StatusOr<Id> a = open_attr(o, name, H5T_FLOAT);
  if (!a.ok()) return a.status();
  double v = 0;
  if (H5Aread(a->get(), H5T_NATIVE_DOUBLE, &v) < 0) return error(o.path, "attribute '" + name + "' cannot be read");
  return v;
}

absl::StatusOr<std::string> Reader::read_fixed_string(hid_t obj, hid_t type, bool is_attr,
                                                      const std::string& what) const {
  const htri_t variable = H5Tis_variable_str(type);
  const size_t size = H5Tget_size(type);
  if (variable != 0 || size == 0 || size > file_size_) return error(what, "is not a fixed-length string");
  Id mem = fixed_string_type(size);
  if (!mem.valid()) return error(what, "string type");
  std::string s(size, '\0');
  const herr_t rc =
      is_attr ? H5Aread(obj, mem.get(), s.data()) : H5Dread(obj, mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data());
  if (rc < 0) return error(what, with_detail("cannot be read"));
  return s;
}

absl::StatusOr<std::string> Reader::attr_string(const Obj& o, const std::string& name) const {
  absl::StatusOr<Id> a = open_attr(o, name, H5T_STRING);
  if (!a.ok()) return a.status();
  Id type = type_id(H5Aget_type(a->get()));
  absl::StatusOr<std::string> s = read_fixed_string(a->get(), type.get(), true, o.path + " attribute '" + name + "'");
  if (!s.ok()) return s.status();
  while (!s->empty() && s->back() == '\0') s->pop_back();  // NUL padding
  return s;
}

absl::StatusOr<Reader::Opened> Reader::open_dataset(const Obj& o, const std::string& name) const {
  const std::string path = o.child(name);
  if (!has(o, name)) return error(o.path, "has no dataset '" + name + "'");
  Opened d;
  d.dataset = dataset_id(H5Dopen2(o.id.get(), name.c_str(), H5P_DEFAULT));
  if (!d.dataset.valid()) return error(path, with_detail("is not a readable dataset"));
  d.space = space_id(H5Dget_space(d.dataset.get()));
  d.type = type_id(H5Dget_type(d.dataset.get()));
  if (!d.space.valid() || !d.type.valid()) return error(path, with_detail("has no readable shape or type"));
  const H5S_class_t cls = H5Sget_simple_extent_type(d.space.get());
  if (cls == H5S_SIMPLE) {
    const int rank = H5Sget_simple_extent_ndims(d.space.get());
    if (rank < 0 || rank > kMaxRank) return error(path, "has an invalid rank");
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    if (rank > 0 && H5Sget_simple_extent_dims(d.space.get(), dims.data(), nullptr) != rank)
      return error(path, "has unreadable dimensions");
    for (hsize_t x : dims) d.shape.push_back(static_cast<int64_t>(std::min<hsize_t>(x, hsize_t{1} << 62)));
  } else if (cls != H5S_SCALAR) {
    return error(path, "has neither a shape nor a single value");
  }
  // numel, with an overflow check; the caller bounds numel * element size by the file size.
  uint64_t n = 1;
  for (int64_t x : d.shape) {
    if (x != 0 && n > file_size_ / static_cast<uint64_t>(x)) return error(path, "is larger than the whole file");
    n *= static_cast<uint64_t>(x);
  }
  d.numel = static_cast<int64_t>(n);
  return d;
}

absl::StatusOr<Tensor> Reader::tensor(const Obj& o, const std::string& name) const {
  absl::StatusOr<Opened> d = open_dataset(o, name);
  if (!d.ok()) return d.status();
  const std::string path = o.child(name);
  std::string tag;
  if (H5Aexists(d->dataset.get(), "dtype") > 0) {
    absl::StatusOr<std::string> t =
        attr_string(Obj{dataset_id(H5Dopen2(o.id.get(), name.c_str(), H5P_DEFAULT)), path}, "dtype");
    if (!t.ok()) return t.status();
    tag = *t;
  }
  const hid_t type = d->type.get();
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  const H5T_sign_t sign = cls == H5T_INTEGER ? H5Tget_sign(type) : H5T_SGN_ERROR;
  DType dtype;
  if (cls == H5T_FLOAT && size == 4 && tag.empty())
    dtype = DType::kF32;
  else if (cls == H5T_FLOAT && size == 8 && tag.empty())
    dtype = DType::kF64;
  else if (cls == H5T_INTEGER && size == 8 && sign == H5T_SGN_2 && tag.empty())
    dtype = DType::kI64;
  else if (cls == H5T_INTEGER && size == 4 && sign == H5T_SGN_2 && tag.empty())
    dtype = DType::kI32;
  else if (cls == H5T_INTEGER && size == 2 && sign == H5T_SGN_NONE && tag == "f16")
    dtype = DType::kF16;
  else if (cls == H5T_INTEGER && size == 2 && sign == H5T_SGN_NONE && tag == "bf16")
    dtype = DType::kBF16;
  else if (cls == H5T_INTEGER && size == 1 && sign == H5T_SGN_NONE && tag.empty())
    dtype = DType::kU8;
  else if (cls == H5T_INTEGER && size == 1 && sign == H5T_SGN_NONE && tag == "bool")
    dtype = DType::kBool;
  else if (cls == H5T_INTEGER && size == 1 && sign == H5T_SGN_NONE && tag == "f8e4m3")
    dtype = DType::kF8E4M3;
  else if (cls == H5T_INTEGER && size == 1 && sign == H5T_SGN_NONE && tag == "f8e5m2")
    dtype = DType::kF8E5M2;
  else
    return error(path,
                 absl::StrCat("has an unsupported type (HDF5 class ", static_cast<int>(cls), ", ", size, " bytes",
                              tag.empty() ? "" : ", dtype '" + tag + "'",
                              "); expected f32, f64, i64, i32, u8, or u16/u8 tagged f16, bf16, bool, f8e4m3, f8e5m2"));
  const uint64_t bytes = static_cast<uint64_t>(d->numel) * element_size(dtype);
  if (bytes > file_size_)
    return error(path, absl::StrCat("declares ", bytes, " bytes of data, more than the file's ", file_size_));
  Tensor t = empty(d->shape, {.dtype = dtype});
  if (d->numel > 0 && H5Dread(d->dataset.get(), type_for(dtype).mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0)
    return error(path, with_detail("cannot be read"));
  if (dtype == DType::kBool) {
    const auto* p = static_cast<const unsigned char*>(t.data_ptr());
    for (int64_t i = 0; i < d->numel; ++i)
      if (p[i] > 1) return error(path, absl::StrCat("holds ", int(p[i]), " at ", i, "; a bool is 0 or 1"));
  }
  return t;
}

absl::StatusOr<std::string> Reader::text(const Obj& o, const std::string& name) const {
  absl::StatusOr<Opened> d = open_dataset(o, name);
  if (!d.ok()) return d.status();
  const std::string path = o.child(name);
  if (H5Tget_class(d->type.get()) != H5T_STRING || !d->shape.empty()) return error(path, "is not a single string");
  absl::StatusOr<std::string> s = read_fixed_string(d->dataset.get(), d->type.get(), false, path);
  if (!s.ok()) return s.status();
  absl::StatusOr<int64_t> bytes = attr_i64(Obj{std::move(d->dataset), path}, "bytes");
  if (!bytes.ok()) return bytes.status();
  if (*bytes < 0 || static_cast<uint64_t>(*bytes) > s->size())
    return error(path, absl::StrCat("attribute 'bytes' is ", *bytes, ", the string has ", s->size()));
  s->resize(static_cast<size_t>(*bytes));
  return s;
}

absl::StatusOr<std::vector<std::string>> Reader::strings(const Obj& o, const std::string& name) const {
  absl::StatusOr<Opened> d = open_dataset(o, name);
  if (!d.ok()) return d.status();
  const std::string path = o.child(name);
  if (H5Tget_class(d->type.get()) != H5T_STRING || H5Tis_variable_str(d->type.get()) != 0 || d->shape.size() != 1)
    return error(path, "is not a list of fixed-length strings");
  const size_t width = H5Tget_size(d->type.get());
  if (width == 0 || width > file_size_ || static_cast<uint64_t>(d->numel) > file_size_ / width)
    return error(path, "is larger than the file");
  std::string packed(static_cast<size_t>(d->numel) * width, '\0');
  Id mem = fixed_string_type(width);
  if (d->numel > 0 &&
      (!mem.valid() || H5Dread(d->dataset.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, packed.data()) < 0))
    return error(path, with_detail("cannot be read"));
  std::vector<std::string> out;
  for (int64_t i = 0; i < d->numel; ++i) {
    std::string s = packed.substr(static_cast<size_t>(i) * width, width);
    s.resize(std::strlen(s.c_str()));  // NUL padding
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<std::vector<double>> Reader::f64s(const Obj& o, const std::string& name) const {
  absl::StatusOr<Opened> d = open_dataset(o, name);
  if (!d.ok()) return d.status();
  const std::string path = o.child(name);
  if (H5Tget_class(d->type.get()) != H5T_FLOAT || d->shape.size() != 1)
    return error(path, "is not a 1-D list of floating-point numbers");
  if (static_cast<uint64_t>(d->numel) * sizeof(double) > file_size_) return error(path, "is larger than the file");
  std::vector<double> v(static_cast<size_t>(d->numel));
  if (!v.empty() && H5Dread(d->dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    return error(path, with_detail("cannot be read"));
  return v;
}

}  // namespace mantissa::h5

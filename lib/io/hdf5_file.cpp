// H5File over the HDF5 C API: handles are RAII (Hid), HDF5's error printing is off and each failure
// becomes a tessera::Error naming the file, the object and HDF5's innermost complaint.
#include "io/hdf5_file.h"

#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "io/hdf5_handle.h"

namespace tessera::io {
namespace {

std::string with_detail(const std::string& msg) { return with_hdf5_detail(msg); }
std::string normalize(const std::string& object) { return absolute_object_path(object); }

// The IEEE half type, as h5py writes numpy float16.
Hid half_type() {
  Hid t(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
  H5Tset_fields(t.get(), 15, 10, 5, 0, 10);
  H5Tset_size(t.get(), 2);
  H5Tset_ebias(t.get(), 15);
  return t;
}

// The in-memory HDF5 type of a tensor dtype (bf16: its raw bits).
Hid memory_type(DType d) {
  switch (d) {
    case DType::f32: return Hid(H5Tcopy(H5T_NATIVE_FLOAT), H5Tclose);
    case DType::i32: return Hid(H5Tcopy(H5T_NATIVE_INT32), H5Tclose);
    case DType::u16: return Hid(H5Tcopy(H5T_NATIVE_UINT16), H5Tclose);
    case DType::bf16: return Hid(H5Tcopy(H5T_NATIVE_UINT16), H5Tclose);
    case DType::u8: return Hid(H5Tcopy(H5T_NATIVE_UINT8), H5Tclose);
    case DType::f16: return half_type();
  }
  fail("unknown dtype");
}

// The on-disk type of a tensor dtype (little-endian; bf16 as uint16 bits).
Hid file_type(DType d) {
  switch (d) {
    case DType::f32: return Hid(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
    case DType::i32: return Hid(H5Tcopy(H5T_STD_I32LE), H5Tclose);
    case DType::u16: return Hid(H5Tcopy(H5T_STD_U16LE), H5Tclose);
    case DType::bf16: return Hid(H5Tcopy(H5T_STD_U16LE), H5Tclose);
    case DType::u8: return Hid(H5Tcopy(H5T_STD_U8LE), H5Tclose);
    case DType::f16: return half_type();
  }
  fail("unknown dtype");
}

// A short name for any stored HDF5 type: "f32", "i64", "u16", "f16", "bf16", "string", ...
std::string type_name(hid_t type) {
  const size_t bytes = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "i") + std::to_string(8 * bytes);
    case H5T_FLOAT: {
      if (bytes == 2) {
        size_t spos, epos, esize, mpos, msize;
        H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
        return esize == 8 ? "bf16" : "f16";
      }
      return "f" + std::to_string(8 * bytes);
    }
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "variable-length";
    case H5T_OPAQUE: return "opaque";
    case H5T_REFERENCE: return "reference";
    case H5T_BITFIELD: return "bitfield";
    case H5T_TIME: return "time";
    default: return "unknown type";
  }
}

uint16_t f32_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

float bf16_bits_to_f32(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

void check_parent_dir(const std::string& path, const char* verb) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    fail("cannot ", verb, " ", path, ": directory ", parent.string(), " does not exist");
}

// A uint16 dataset holding bfloat16 bits carries the string attribute dtype = "bf16".
bool marked_bf16(const H5File& f, const std::string& obj) {
  if (!f.has_attr(obj, "dtype")) return false;
  try {
    return f.attr_string(obj, "dtype") == "bf16";
  } catch (const Error&) {
    return false;  // a "dtype" attribute of another kind is not our marker
  }
}

}  // namespace

// ---- file ---------------------------------------------------------------------------------------

namespace {
hid_t open_existing(const std::string& path, unsigned flags) {
  silence_hdf5();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("cannot open ", path, ": no such file");
  if (std::filesystem::is_directory(path, ec)) fail("cannot open ", path, ": it is a directory");
  if (!std::ifstream(path, std::ios::binary).good()) fail("cannot open ", path, ": not readable");
  if (std::filesystem::file_size(path, ec) == 0) fail(path, " is not an HDF5 file (it is empty)");
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 == 0) fail(path, " is not an HDF5 file");
  if (is_h5 < 0) fail(with_detail("cannot open " + path));
  if (const std::string problem = superblock_problem(path); !problem.empty()) fail("cannot open ", path, ": ", problem);
  const hid_t id = H5Fopen(path.c_str(), flags, H5P_DEFAULT);
  if (id < 0) {
    const std::string d = hdf5_detail();
    const bool truncated = d.find("truncated") != std::string::npos;
    fail("cannot open ", path, truncated ? ": the file is truncated" : ": corrupt HDF5 file",
         d.empty() ? "" : " (HDF5: " + d + ")");
  }
  return id;
}
}  // namespace

H5File H5File::open_read(const std::string& path) {
  return H5File(path, open_existing(path, H5F_ACC_RDONLY));
}

H5File H5File::open_rw(const std::string& path) {
  return H5File(path, open_existing(path, H5F_ACC_RDWR));
}

H5File H5File::create(const std::string& path) {
  silence_hdf5();
  check_parent_dir(path, "create");
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) fail(with_detail("cannot create " + path));
  return H5File(path, id);
}

H5File::H5File(H5File&& other) noexcept
    : path_(std::move(other.path_)), id_(std::exchange(other.id_, -1)) {}

H5File& H5File::operator=(H5File&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    id_ = std::exchange(other.id_, -1);
  }
  return *this;
}

H5File::~H5File() { close(); }

void H5File::close() noexcept {
  if (id_ >= 0) H5Fclose(id_);
  id_ = -1;
}

void H5File::flush() {
  TESSERA_CHECK(id_ >= 0, "flush on a closed H5File");
  if (H5Fflush(id_, H5F_SCOPE_GLOBAL) < 0) fail(with_detail(path_ + ": flush failed"));
}

// ---- objects ------------------------------------------------------------------------------------

bool H5File::has(const std::string& object) const {
  TESSERA_CHECK(id_ >= 0, "has() on a closed H5File");
  const std::string obj = normalize(object);
  if (obj == "/") return true;
  // Each prefix must exist as a link before the next can be asked about.
  size_t pos = 0;
  while (true) {
    pos = obj.find('/', pos + 1);
    const std::string prefix = obj.substr(0, pos);
    const htri_t link = H5Lexists(id_, prefix.c_str(), H5P_DEFAULT);
    if (link <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    const htri_t target = H5Oexists_by_name(id_, prefix.c_str(), H5P_DEFAULT);
    if (target <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (pos == std::string::npos) return true;
  }
}

namespace {
Hid open_dataset(hid_t file, const std::string& path, const std::string& obj, bool exists) {
  if (!exists) fail(path, ": no dataset ", obj);
  Hid o(H5Oopen(file, obj.c_str(), H5P_DEFAULT), H5Oclose);
  if (!o.valid()) fail(with_detail(path + ": cannot open " + obj));
  if (H5Iget_type(o.get()) != H5I_DATASET) fail(path, ": ", obj, " is a group, not a dataset");
  return Hid(H5Dopen2(file, obj.c_str(), H5P_DEFAULT), H5Dclose);
}

std::string dims_str(const std::vector<int64_t>& dims) { return Shape(dims).str(); }
}  // namespace

std::vector<int64_t> H5File::shape(const std::string& dataset) const {
  const std::string obj = normalize(dataset);
  Hid d = open_dataset(id_, path_, obj, has(obj));
  Hid space(H5Dget_space(d.get()), H5Sclose);
  if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) fail(path_, ": dataset ", obj, " has no dataspace");
  return dataspace_dims(space.get());
}

DType H5File::dtype(const std::string& dataset) const {
  const std::string obj = normalize(dataset);
  Hid d = open_dataset(id_, path_, obj, has(obj));
  Hid type(H5Dget_type(d.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  const size_t bytes = H5Tget_size(type.get());
  const std::string name = type_name(type.get());
  if (cls == H5T_INTEGER) {
    if (name == "u16" && marked_bf16(*this, obj)) return DType::bf16;
    if (name == "i32") return DType::i32;
    if (name == "u16") return DType::u16;
    if (name == "u8") return DType::u8;
  } else if (cls == H5T_FLOAT) {
    if (bytes == 4 && name == "f32") return DType::f32;
    if (name == "f16") return DType::f16;
    if (name == "bf16") return DType::bf16;
  }
  fail(path_, ": dataset ", obj, " has type ", name, ", which tessera does not hold (f32, i32, u16, u8, f16, bf16)");
}

std::string H5File::stored_type(const std::string& dataset) const {
  const std::string obj = normalize(dataset);
  Hid d = open_dataset(id_, path_, obj, has(obj));
  Hid type(H5Dget_type(d.get()), H5Tclose);
  const std::string name = type_name(type.get());
  if (name == "u16" && marked_bf16(*this, obj)) return "bf16";
  return name;
}

Tensor H5File::read(const std::string& dataset, DType as) const {
  const std::string obj = normalize(dataset);
  Hid d = open_dataset(id_, path_, obj, has(obj));
  Hid space(H5Dget_space(d.get()), H5Sclose);
  if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) fail(path_, ": dataset ", obj, " has no dataspace");
  const std::vector<int64_t> dims = dataspace_dims(space.get());
  Hid stored(H5Dget_type(d.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(stored.get());
  if (cls != H5T_INTEGER && cls != H5T_FLOAT)
    fail(path_, ": dataset ", obj, " holds ", type_name(stored.get()), ", which cannot be read as ",
         dtype_name(as));
  const bool stored_bf16 = cls == H5T_INTEGER && type_name(stored.get()) == "u16" &&
                           marked_bf16(*this, obj);

  Tensor out = Tensor::empty(Shape(dims), as);
  const int64_t n = out.numel();
  if (n == 0) return out;
  auto h5read = [&](hid_t mem, void* buf) {
    if (H5Dread(d.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
      fail(with_detail(path_ + ": cannot read dataset " + obj + " as " + dtype_name(as)));
  };

  if (stored_bf16 || as == DType::bf16) {
    // Through f32: bf16 bits widen exactly; f32 rounds to bf16 to nearest even.
    std::vector<float> f(static_cast<size_t>(n));
    if (stored_bf16) {
      std::vector<uint16_t> bits(static_cast<size_t>(n));
      h5read(H5T_NATIVE_UINT16, bits.data());
      if (as == DType::bf16) {
        std::memcpy(out.raw(), bits.data(), bits.size() * 2);
        return out;
      }
      for (int64_t i = 0; i < n; ++i) f[i] = bf16_bits_to_f32(bits[i]);
    } else {
      h5read(H5T_NATIVE_FLOAT, f.data());
    }
    if (as == DType::bf16) {
      uint16_t* o = out.bits16();
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16_bits(f[i]);
    } else if (as == DType::f32) {
      std::memcpy(out.raw(), f.data(), f.size() * 4);
    } else {
      // f32 is the widest tensor type, so HDF5 can convert the buffer in place.
      Hid mem = memory_type(as);
      if (H5Tconvert(H5T_NATIVE_FLOAT, mem.get(), static_cast<size_t>(n), f.data(), nullptr, H5P_DEFAULT) < 0)
        fail(with_detail(path_ + ": cannot convert dataset " + obj + " to " + dtype_name(as)));
      std::memcpy(out.raw(), f.data(), out.nbytes());
    }
    return out;
  }
  Hid mem = memory_type(as);
  h5read(mem.get(), out.raw());
  return out;
}

std::vector<int64_t> H5File::read_i64(const std::string& dataset, int64_t start, int64_t count) const {
  const std::string obj = normalize(dataset);
  Hid d = open_dataset(id_, path_, obj, has(obj));
  Hid space(H5Dget_space(d.get()), H5Sclose);
  const std::vector<int64_t> dims = dataspace_dims(space.get());
  if (dims.size() != 1) fail(path_, ": ", obj, " is not 1-D");
  if (start < 0 || count < 0 || start + count > dims[0])
    fail(path_, ": elements [", start, ", ", start + count, ") are outside ", obj, " (", dims[0], " elements)");
  Hid stored(H5Dget_type(d.get()), H5Tclose);
  if (H5Tget_class(stored.get()) != H5T_INTEGER)
    fail(path_, ": ", obj, " holds ", type_name(stored.get()), ", not integers");
  std::vector<int64_t> out(static_cast<size_t>(count));
  if (count == 0) return out;
  const hsize_t offset = static_cast<hsize_t>(start), n = static_cast<hsize_t>(count);
  H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, &offset, nullptr, &n, nullptr);
  Hid mem(H5Screate_simple(1, &n, nullptr), H5Sclose);
  if (H5Dread(d.get(), H5T_NATIVE_INT64, mem.get(), space.get(), H5P_DEFAULT, out.data()) < 0)
    fail(with_detail(path_ + ": cannot read elements of " + obj));
  return out;
}

void H5File::read_into(const std::string& dataset, Tensor& out) const {
  const std::string obj = normalize(dataset);
  TESSERA_CHECK(out.defined(), path_, ": read_into ", obj, ": the output tensor is undefined");
  const std::vector<int64_t> dims = shape(obj);
  if (dims != out.shape().dims())
    fail(path_, ": dataset ", obj, " has shape ", dims_str(dims), ", expected ", out.shape().str());
  Tensor t = read(obj, out.dtype());
  out.copy_from(t);
}

void H5File::write(const std::string& dataset, const Tensor& t) {
  const std::string obj = normalize(dataset);
  TESSERA_CHECK(id_ >= 0, "write on a closed H5File");
  TESSERA_CHECK(obj != "/", path_, ": cannot write a dataset at the root group");
  TESSERA_CHECK(t.defined(), path_, ": cannot write undefined tensor to ", obj);
  if (has(obj)) fail(path_, ": cannot write ", obj, ": it already exists");
  const Tensor host = t.device() == Device::cpu ? t : t.to(Device::cpu);

  const std::vector<int64_t>& dims = host.shape().dims();
  Hid space;
  if (dims.empty()) {
    space = Hid(H5Screate(H5S_SCALAR), H5Sclose);
  } else {
    std::vector<hsize_t> hd(dims.begin(), dims.end());
    space = Hid(H5Screate_simple(static_cast<int>(hd.size()), hd.data(), nullptr), H5Sclose);
  }
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Hid ftype = file_type(host.dtype());
  Hid mtype = memory_type(host.dtype());
  Hid d(H5Dcreate2(id_, obj.c_str(), ftype.get(), space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
        H5Dclose);
  if (!d.valid()) fail(with_detail(path_ + ": cannot create dataset " + obj));
  if (host.numel() > 0 &&
      H5Dwrite(d.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, host.raw()) < 0)
    fail(with_detail(path_ + ": cannot write dataset " + obj));
  d.reset();
  if (host.dtype() == DType::bf16) set_attr(obj, "dtype", std::string("bf16"));
}

std::vector<std::string> H5File::list(const std::string& group) const {
  const std::string obj = normalize(group);
  if (!has(obj)) fail(path_, ": no group ", obj);
  Hid o(H5Oopen(id_, obj.c_str(), H5P_DEFAULT), H5Oclose);
  if (!o.valid()) fail(with_detail(path_ + ": cannot open " + obj));
  if (H5Iget_type(o.get()) != H5I_GROUP) fail(path_, ": ", obj, " is a dataset, not a group");
  H5G_info_t info;
  if (H5Gget_info(o.get(), &info) < 0) fail(with_detail(path_ + ": cannot list " + obj));
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(o.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) fail(with_detail(path_ + ": cannot list " + obj));
    std::string name(static_cast<size_t>(len) + 1, '\0');
    H5Lget_name_by_idx(o.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<size_t>(len));
    names.push_back(std::move(name));
  }
  return names;
}

// ---- attributes ---------------------------------------------------------------------------------

namespace {
Hid open_object(hid_t file, const std::string& path, const std::string& obj, bool exists) {
  if (!exists) fail(path, ": no object ", obj);
  Hid o(H5Oopen(file, obj.c_str(), H5P_DEFAULT), H5Oclose);
  if (!o.valid()) fail(with_detail(path + ": cannot open " + obj));
  return o;
}

void write_attr(hid_t file, const std::string& path, const std::string& obj, bool exists,
                const std::string& key, hid_t ftype, hid_t mtype, const void* value) {
  Hid o = open_object(file, path, obj, exists);
  write_scalar_attribute(o.get(), path + ": " + obj, key, ftype, mtype, value);
}

// An open attribute holding exactly one element, with its stored type.
struct OpenAttr {
  Hid attr, type;
};
}  // namespace

void H5File::set_attr(const std::string& object, const std::string& key, int64_t v) {
  const std::string obj = normalize(object);
  write_attr(id_, path_, obj, has(obj), key, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

void H5File::set_attr(const std::string& object, const std::string& key, double v) {
  const std::string obj = normalize(object);
  write_attr(id_, path_, obj, has(obj), key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

void H5File::set_attr(const std::string& object, const std::string& key, const std::string& v) {
  const std::string obj = normalize(object);
  Hid t = vlen_string_type();
  const char* p = v.c_str();
  write_attr(id_, path_, obj, has(obj), key, t.get(), t.get(), &p);
}

bool H5File::has_attr(const std::string& object, const std::string& key) const {
  const std::string obj = normalize(object);
  if (!has(obj)) return false;
  const htri_t r = H5Aexists_by_name(id_, obj.c_str(), key.c_str(), H5P_DEFAULT);
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

namespace {
OpenAttr open_attr(const H5File& f, hid_t file, const std::string& obj, const std::string& key) {
  if (!f.has(obj)) fail(f.path(), ": no object ", obj, " (looking for attribute ", key, ")");
  if (!f.has_attr(obj, key)) fail(f.path(), ": ", obj, " has no attribute ", key);
  OpenAttr a;
  a.attr = Hid(H5Aopen_by_name(file, obj.c_str(), key.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.attr.valid()) fail(with_detail(f.path() + ": " + obj + ": cannot open attribute " + key));
  a.type = Hid(H5Aget_type(a.attr.get()), H5Tclose);
  Hid space(H5Aget_space(a.attr.get()), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    fail(f.path(), ": ", obj, ": attribute ", key, " is not a single value");
  return a;
}
}  // namespace

int64_t H5File::attr_int(const std::string& object, const std::string& key) const {
  const std::string obj = normalize(object);
  OpenAttr a = open_attr(*this, id_, obj, key);
  if (H5Tget_class(a.type.get()) != H5T_INTEGER)
    fail(path_, ": ", obj, ": attribute ", key, " is a ", type_name(a.type.get()), ", expected an integer");
  int64_t v = 0;
  if (H5Aread(a.attr.get(), H5T_NATIVE_INT64, &v) < 0)
    fail(with_detail(path_ + ": " + obj + ": cannot read attribute " + key));
  return v;
}

double H5File::attr_double(const std::string& object, const std::string& key) const {
  const std::string obj = normalize(object);
  OpenAttr a = open_attr(*this, id_, obj, key);
  const H5T_class_t cls = H5Tget_class(a.type.get());
  if (cls != H5T_INTEGER && cls != H5T_FLOAT)
    fail(path_, ": ", obj, ": attribute ", key, " is a ", type_name(a.type.get()), ", expected a number");
  double v = 0;
  if (H5Aread(a.attr.get(), H5T_NATIVE_DOUBLE, &v) < 0)
    fail(with_detail(path_ + ": " + obj + ": cannot read attribute " + key));
  return v;
}

std::string H5File::attr_string(const std::string& object, const std::string& key) const {
  const std::string obj = normalize(object);
  OpenAttr a = open_attr(*this, id_, obj, key);
  if (H5Tget_class(a.type.get()) != H5T_STRING)
    fail(path_, ": ", obj, ": attribute ", key, " is a ", type_name(a.type.get()), ", expected a string");
  std::string s;
  if (!read_string_attribute(a.attr.get(), a.type.get(), s))
    fail(with_detail(path_ + ": " + obj + ": cannot read attribute " + key));
  return s;
}

}  // namespace tessera::io

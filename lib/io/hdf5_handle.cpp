// HDF5 error-stack handling shared by H5File and the checkpoint files.
#include "io/hdf5_handle.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace tessera::io {

Hid vlen_string_type() {
  Hid t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

bool read_string_attribute(hid_t attr, hid_t type, std::string& out) {
  if (H5Tis_variable_str(type) > 0) {
    Hid mem = vlen_string_type();
    char* p = nullptr;
    if (H5Aread(attr, mem.get(), &p) < 0) return false;
    out = p ? p : "";
    if (p) H5free_memory(p);
    return true;
  }
  const size_t n = H5Tget_size(type);
  Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mem.get(), n);
  H5Tset_strpad(mem.get(), H5T_STR_NULLPAD);
  out.assign(n, '\0');
  if (H5Aread(attr, mem.get(), out.data()) < 0) return false;
  out.resize(std::strlen(out.c_str()));
  return true;
}

void silence_hdf5() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

std::string hdf5_detail(int max) {
  std::vector<std::string> parts;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        auto& v = *static_cast<std::vector<std::string>*>(data);
        if (e->desc && *e->desc && std::find(v.begin(), v.end(), e->desc) == v.end()) v.emplace_back(e->desc);
        return 0;
      },
      &parts);
  H5Eclear2(H5E_DEFAULT);
  std::string out;
  for (size_t i = 0; i < parts.size() && static_cast<int>(i) < max; ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

std::string with_hdf5_detail(const std::string& msg, int max) {
  const std::string d = hdf5_detail(max);
  return d.empty() ? msg : msg + " (HDF5: " + d + ")";
}

std::string absolute_object_path(const std::string& object) {
  std::string s = object.empty() || object[0] != '/' ? "/" + object : object;
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

std::vector<int64_t> dataspace_dims(hid_t space) {
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank <= 0) return {};
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

void write_scalar_attribute(hid_t obj, const std::string& where, const std::string& key, hid_t file_type,
                            hid_t memory_type, const void* value) {
  if (H5Aexists(obj, key.c_str()) > 0 && H5Adelete(obj, key.c_str()) < 0)
    fail(with_hdf5_detail(where + ": cannot replace attribute " + key, 3));
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(obj, key.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid() || H5Awrite(a.get(), memory_type, value) < 0)
    fail(with_hdf5_detail(where + ": cannot write attribute " + key, 3));
}

// The superblock's fields up to its end-of-file address (HDF5 file format spec, "Superblock"):
// versions 0 and 1 give the sizes at bytes 13-14 and four addresses from byte 24 (28 in version 1:
// two more B-tree bytes and two reserved), the end of file the third; versions 2 and 3 give the
// sizes at bytes 9-10 and the addresses from byte 12, the end of file the third as well.
std::string superblock_problem(const std::string& path) {
  static constexpr unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  unsigned char head[64] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(head), sizeof head);
  const int64_t got = in.gcount();
  if (got < 16 || std::memcmp(head, kSignature, sizeof kSignature) != 0) return "";  // elsewhere, or HDF5's to judge
  const int version = head[8];
  if (version > 3) return "";
  const int offsets = version <= 1 ? head[13] : head[9];
  if (offsets != 2 && offsets != 4 && offsets != 8) return "";
  const int64_t addresses = version == 0 ? 24 : version == 1 ? 28 : 12;
  const int64_t eof_at = addresses + 2 * offsets, eof_end = eof_at + offsets;
  if (got < eof_end)
    return "the file is truncated (" + std::to_string(got) + " bytes end inside the superblock)";
  uint64_t eof = 0;
  for (int i = offsets - 1; i >= 0; --i) eof = (eof << 8) | head[eof_at + i];
  if (eof < static_cast<uint64_t>(eof_end))
    return "corrupt HDF5 file (its superblock puts the end of file at byte " + std::to_string(eof) +
           ", inside the superblock itself)";
  return "";
}

}  // namespace tessera::io

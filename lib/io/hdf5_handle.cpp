// HDF5 error-stack handling shared by H5File and the checkpoint files.
#include "io/hdf5_handle.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

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

}  // namespace tessera::io

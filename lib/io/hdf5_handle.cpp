// HDF5 error-stack handling shared by H5File and the checkpoint files.
#include "io/hdf5_handle.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace tessera::io {

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

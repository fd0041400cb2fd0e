// libFuzzer target: arbitrary bytes as an HDF5 token data set, opened with io::TokenDataset::open
// (both splits). Only tessera::Error may come out; any other exception or a crash is a finding.
#include <cstdint>
#include <exception>

#include "core/error.h"
#include "fuzz_common.h"
#include "io/token_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = tessera::fuzz::scratch_path("token_dataset", ".h5");
  tessera::fuzz::write_bytes(path, data, size);
  for (const char* split : {"train", "val"}) {
    try {
      const tessera::io::TokenDataset ds = tessera::io::TokenDataset::open(path, split);
      if (ds.size() <= 0 || ds.vocab_size < 1) tessera::fuzz::unexpected("opened an invalid data set");
    } catch (const tessera::Error&) {
      // the expected way to refuse a bad file
    } catch (const std::exception& e) {
      tessera::fuzz::unexpected(e.what());
    }
  }
  return 0;
}

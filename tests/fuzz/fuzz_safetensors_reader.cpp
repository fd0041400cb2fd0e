// libFuzzer target: arbitrary bytes as a safetensors file, read with io::SafetensorsFile: every
// tensor found, converted to f32. Only tessera::Error may come out.
#include <cstdint>
#include <exception>
#include <typeinfo>

#include "core/error.h"
#include "fuzz_common.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = tessera::fuzz::scratch_path("safetensors", ".safetensors");
  tessera::fuzz::write_bytes(path, data, size);
  try {
    const tessera::io::SafetensorsFile file(path);
    double sum = 0;
    for (const tessera::io::StTensor& t : file.tensors()) {
      if (file.find(t.name) != &t) tessera::fuzz::unexpected("find() disagrees with tensors()");
      for (float x : file.read_f32(t)) sum += x;
    }
    (void)sum;
  } catch (const tessera::Error&) {
  } catch (const std::exception& e) {
    tessera::fuzz::unexpected(typeid(e).name());
  }
  return 0;
}

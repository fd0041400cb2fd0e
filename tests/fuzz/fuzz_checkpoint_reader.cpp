// libFuzzer target: arbitrary bytes as a checkpoint file, read with io::CheckpointReader (serial,
// MPI_COMM_NULL): tensors(), shapes, attributes, verify(). Only tessera::Error may come out.
#include <mpi.h>

#include <cstdint>
#include <exception>

#include "core/error.h"
#include "fuzz_common.h"
#include "io/checkpoint_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = tessera::fuzz::scratch_path("checkpoint", ".h5");
  tessera::fuzz::write_bytes(path, data, size);
  try {
    tessera::io::CheckpointReader reader(path, MPI_COMM_NULL);
    for (const std::string& name : reader.tensors()) {
      try {
        (void)reader.has(name);
        (void)reader.shape(name);
      } catch (const tessera::Error&) {
      }
    }
    for (const std::string& key : reader.attr_keys()) {
      try {
        switch (reader.attr_type(key)) {
          case tessera::io::CheckpointReader::AttrType::int64: (void)reader.attr_int(key); break;
          case tessera::io::CheckpointReader::AttrType::float64: (void)reader.attr_double(key); break;
          case tessera::io::CheckpointReader::AttrType::string: (void)reader.attr_string(key); break;
          case tessera::io::CheckpointReader::AttrType::other: break;
        }
      } catch (const tessera::Error&) {
      }
    }
    reader.verify();
  } catch (const tessera::Error&) {
    // the expected way to refuse a bad file
  } catch (const std::exception& e) {
    tessera::fuzz::unexpected(e.what());
  }
  return 0;
}

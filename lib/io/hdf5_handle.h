// What every HDF5 user in lib/io shares: Hid (one HDF5 identifier, released by RAII), turning off
// HDF5's own error printing, reading HDF5's error stack into our messages, object paths, dataspace
// extents and scalar attributes.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera::io {

static_assert(sizeof(hid_t) == sizeof(int64_t), "lib/io stores hid_t as int64_t");

// One HDF5 identifier and the function that releases it.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  Hid(Hid&& o) noexcept : id_(std::exchange(o.id_, -1)), closer_(o.closer_) {}
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      closer_ = o.closer_;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { reset(); }
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = -1;
  }
  bool valid() const { return id_ >= 0; }
  hid_t get() const { return id_; }

 private:
  hid_t id_ = -1;
  herr_t (*closer_)(hid_t) = nullptr;
};

// A variable-length UTF-8 string type (as h5py writes str attributes).
Hid vlen_string_type();

// Reads a string attribute (variable- or fixed-length) of string type `type` into `out`; false
// when HDF5 cannot read it (the caller names file, object and key).
bool read_string_attribute(hid_t attr, hid_t type, std::string& out);

// Turns HDF5's automatic error printing off (once per process): our errors say what happened.
void silence_hdf5();

// HDF5's messages on the current error stack, innermost (most specific) first, at most `max`
// distinct ones joined by "; " ("" if none); the stack is cleared.
std::string hdf5_detail(int max = 1);

// `msg` followed by " (HDF5: ...)" with up to `max` of HDF5's messages, or `msg` alone when HDF5
// said nothing; the stack is cleared.
std::string with_hdf5_detail(const std::string& msg, int max = 1);

// "/a/b" for "a/b", "/a/b/" or "/a/b"; "/" stays "/".
std::string absolute_object_path(const std::string& object);

// The extent of a simple dataspace, outermost first ({} for a scalar or null one).
std::vector<int64_t> dataspace_dims(hid_t space);

// Writes a scalar attribute `key` of stored type file_type on obj from `value` (memory_type),
// replacing one of that name. Throws tessera::Error "<where>: cannot replace|write attribute <key>"
// with HDF5's detail.
void write_scalar_attribute(hid_t obj, const std::string& where, const std::string& key, hid_t file_type,
                            hid_t memory_type, const void* value);

// What is wrong with the superblock at the start of an HDF5 file, before HDF5 reads it ("" when
// nothing is seen, or the superblock is elsewhere): an end-of-file address inside the superblock
// itself, or a file too short to hold its fields. HDF5 1.10.8 reads such a file (49 bytes with an
// end of file of 0) by filling about 2 GB before it fails (tests/fuzz/regressions/).
std::string superblock_problem(const std::string& path);

}  // namespace tessera::io

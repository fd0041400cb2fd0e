// H5File: one HDF5 file (RAII, move-only) with the few operations tessera needs: whole-dataset
// tensor reads/writes with type conversion, scalar attributes, existence checks and listing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tessera::io {

// Objects are absolute paths: "/" is the root group, "/params/wte.weight" a dataset. Every error is
// a tessera::Error naming the file and the object (and attribute key). HDF5's own error printing is
// switched off; its innermost message is folded into ours where it helps.
//
// Storage of tensor dtypes: f32, i32, u16, u8 as the HDF5 little-endian types; f16 as the IEEE
// half type (what h5py writes for float16); bf16 as uint16 bits with the string attribute
// dtype = "bf16" on the dataset (HDF5 has no native bfloat16).
class H5File {
 public:
  static H5File open_read(const std::string& path);  // missing file / not HDF5 / truncated -> error
  static H5File open_rw(const std::string& path);
  static H5File create(const std::string& path);  // truncates an existing file

  H5File(H5File&& other) noexcept;
  H5File& operator=(H5File&& other) noexcept;
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;
  ~H5File();

  const std::string& path() const { return path_; }
  // The open file's hid_t, for lib/io's own HDF5 code beyond these operations (token_reader.cpp).
  int64_t raw_id() const { return id_; }

  // A dataset or group at `object`; false if it or any parent is missing.
  bool has(const std::string& object) const;
  std::vector<int64_t> shape(const std::string& dataset) const;
  // f32, i32, u16, u8, f16, bf16; throws for other stored types, naming them (e.g. "f64").
  DType dtype(const std::string& dataset) const;
  // The stored type's short name for messages, whatever it is: "f64", "i64", "u16", "string", ...
  std::string stored_type(const std::string& dataset) const;

  // The whole dataset as a CPU tensor of dtype `as`, converted from the stored numeric type.
  Tensor read(const std::string& dataset, DType as) const;
  // The whole dataset into `out` (any device): shapes must match exactly; converts to out.dtype().
  void read_into(const std::string& dataset, Tensor& out) const;
  // Elements [start, start + count) of a 1-D integer dataset as int64 (one hyperslab read).
  std::vector<int64_t> read_i64(const std::string& dataset, int64_t start, int64_t count) const;
  // A new dataset (intermediate groups are created); an existing object is an error.
  void write(const std::string& dataset, const Tensor& t);

  // Scalar attributes on a group or dataset; setting an existing key replaces it.
  void set_attr(const std::string& object, const std::string& key, int64_t v);
  void set_attr(const std::string& object, const std::string& key, double v);
  void set_attr(const std::string& object, const std::string& key, const std::string& v);
  void set_attr(const std::string& object, const std::string& key, const char* v) {
    set_attr(object, key, std::string(v));
  }
  void set_attr(const std::string& object, const std::string& key, int v) {
    set_attr(object, key, static_cast<int64_t>(v));
  }
  bool has_attr(const std::string& object, const std::string& key) const;
  int64_t attr_int(const std::string& object, const std::string& key) const;  // missing -> error
  double attr_double(const std::string& object, const std::string& key) const;  // ints convert
  std::string attr_string(const std::string& object, const std::string& key) const;

  // Names of the children of a group, sorted by name.
  std::vector<std::string> list(const std::string& group) const;
  void flush();

 private:
  H5File(std::string path, int64_t id) : path_(std::move(path)), id_(id) {}
  void close() noexcept;
  std::string path_;
  int64_t id_ = -1;  // hid_t of the open file, -1 when moved from
};

}  // namespace tessera::io

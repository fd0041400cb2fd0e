// CheckpointWriter / CheckpointReader: one HDF5 checkpoint file per step, tensors in their global
// logical shape, written collectively with parallel HDF5 (each rank its own ranges), read by any.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/shape.h"

namespace tessera::io {

// The file, as the design notes describe it:
//   - one dataset per tensor at its path (e.g. "/params/blocks.0.ln1.weight"), contiguous, in
//     its global logical shape, with a uint64 attribute "checksum" (checkpoint_checksum below);
//     f32 unless created with another TensorType (a quantised checkpoint's int8 / packed int4
//     weights and bf16 scales, docs/checkpoints.md);
//   - root attributes "version" = 1, whatever the caller set (step, consumed_samples, layout...),
//     and, written last of all, "format" = "tessera-checkpoint".
// It is written as <path>.tmp and renamed to <path> only when complete and on disk. A .tmp is never
// a checkpoint: CheckpointReader refuses any name ending in ".tmp"; and a file cut short before
// commit() is refused whatever its name, lacking "format" (written last) if it is HDF5 at all.
//
// Every error is a tessera::Error naming the file and, where there is one, the tensor or attribute.
// HDF5's own error printing is off; its messages are folded into ours.

inline constexpr const char* kCheckpointFormat = "tessera-checkpoint";
// Version 2 adds the root attribute metadata_checksum (see CheckpointReader::verify); version 1
// files (without it) still load.
inline constexpr int64_t kCheckpointVersion = 2;

// The checksum of elements [begin, end) of a tensor's global row-major flattening, data[0] being
// element `begin`: the sum mod 2^64 of mix64(bits(x_i) ^ i * golden). Order-independent, so partial
// sums of disjoint ranges add up (mod 2^64) to the whole tensor's; any single changed bit changes it.
uint64_t checkpoint_checksum(const float* data, int64_t begin, int64_t end);

// A tensor's element type on disk. f32 is every training checkpoint's; the integer types hold a
// quantised checkpoint's weights (i8: int8 values; u8: packed int4 pairs or zero points; u16: bf16
// scales' bits). An integer element's checksum bits are its own bits, zero-extended.
enum class TensorType { f32, i8, u8, u16 };
const char* tensor_type_name(TensorType type);  // "f32", "int8", "uint8", "uint16"
uint64_t checkpoint_checksum(const void* data, TensorType type, int64_t begin, int64_t end);

// Elements [begin, end) of a tensor's row-major flattening.
struct FlatRange {
  int64_t begin = 0, end = 0;
};

class CheckpointWriter {
 public:
  // Collective over comm. Creates <final_path>.tmp (truncating a stale one); nothing at final_path
  // is touched until commit(). comm = MPI_COMM_NULL writes serially (one process, no MPI calls).
  CheckpointWriter(const std::string& final_path, MPI_Comm comm);
  // Without commit(): closes the .tmp and rank 0 removes it. Closing a parallel HDF5 file is itself
  // collective, so when an exception is unwinding that may be this rank's alone (not one this class
  // raised on every rank) the handle is abandoned instead, never closed: the job is about to abort.
  ~CheckpointWriter();
  // Disk space is reserved (posix_fallocate, rank 0) as tensors are created, so a full disk shows
  // as "no space left on device" from create() or commit() before HDF5 writes into the space.
  // Any I/O failure throws on every rank at once, having already closed the file and removed the
  // .tmp; the writer is then dead (every later call throws). Only if HDF5 itself failed a write
  // is its handle abandoned rather than closed, as HDF5 1.10 cannot reliably close a parallel file
  // then (its ranks diverge); apps end the job on such an error, as on any, which releases it.
  // Test hook: TESSERA_CKPT_DISK_LIMIT_BYTES=N makes the reservation fail, as a full disk would,
  // for any file growing past N bytes.
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  const std::string& path() const { return final_path_; }
  const std::string& tmp_path() const { return tmp_path_; }

  // Every method below is collective: every rank calls it, in the same order, with the same name
  // (and shape, key, value). A failure on any rank, bad arguments included, throws the same
  // tessera::Error on every rank (naming the first failing rank), so no rank is left waiting.

  // A new dataset at `name` ("/params/wte.weight"; intermediate groups are created), f32 unless
  // another type is given; write_range's pointer type must match it.
  void create(const std::string& name, const Shape& global_shape, TensorType type = TensorType::f32);
  // This rank's elements [begin, end) of the tensor's global flattening (empty is fine), `data`
  // holding end - begin values. Ranges of different ranks must not overlap; a tensor may take
  // several rounds of write_range. By commit() the ranks must have covered every element once.
  void write_range(const std::string& name, int64_t begin, int64_t end, const float* data);
  // Several ranges at once (ascending, not overlapping; `data` holds them one after the other):
  // a tensor-parallel slice, one range per row of a column slice. One collective write.
  void write_runs(const std::string& name, const std::vector<FlatRange>& runs, const float* data);
  // The same for the integer types (a quantised checkpoint's tensors).
  void write_range(const std::string& name, int64_t begin, int64_t end, const int8_t* data);
  void write_range(const std::string& name, int64_t begin, int64_t end, const uint8_t* data);
  void write_range(const std::string& name, int64_t begin, int64_t end, const uint16_t* data);
  void write_range(const std::string& name, int64_t begin, int64_t end, std::nullptr_t) {  // f32's
    write_range(name, begin, end, static_cast<const float*>(nullptr));
  }
  // Root attributes; rank 0's value is the one written. "format" and "version" are reserved.
  void set_attr(const std::string& key, int64_t v);
  void set_attr(const std::string& key, double v);
  void set_attr(const std::string& key, const std::string& v);
  void set_attr(const std::string& key, const char* v) { set_attr(key, std::string(v)); }
  void set_attr(const std::string& key, int v) { set_attr(key, static_cast<int64_t>(v)); }
  // Checks that every tensor was written whole, writes the checksums, then "format", flushes,
  // closes and fsyncs, then rank 0 renames <path>.tmp to <path> (atomic) and syncs the directory;
  // returns on every rank once the rename is done. Test hook: with TESSERA_CKPT_CRASH_BEFORE_RENAME
  // set in the environment, the process raises SIGKILL after the fsync, before the rename.
  void commit();

 private:
  struct Entry {
    std::string name;
    Shape shape;
    TensorType type = TensorType::f32;
    uint64_t checksum = 0;  // this rank's partial sum
    uint64_t written = 0;   // elements this rank wrote
  };
  // What failed: the caller's arguments (the writer stays usable), HDF5 (a write, flush or close
  // failed inside it), or the disk (space reservation, fsync, rename) with HDF5 still sound.
  enum class Failure { args, hdf5, disk };
  // Throws on every rank if `ok` is false on any, or if `args` (a hash of the call's arguments)
  // differs between ranks; after an hdf5 or disk failure the .tmp is discarded first.
  void agree(bool ok, const std::string& message, uint64_t args, Failure kind);
  void check_usable(const char* op) const;
  void check_attr_name(const std::string& key) const;  // set_attr's: usable, not reserved or empty
  void discard_after_failure(bool hdf5_failed) noexcept;
  void reserve_space(uint64_t end, const std::string& what, bool past_eof);
  Entry& entry(const std::string& name);
  void write_root_attr(const std::string& key, int kind, const void* value);
  void write_typed(const std::string& name, const std::vector<FlatRange>& runs, const void* data, TensorType type);
  void close_file() noexcept;

  std::string final_path_, tmp_path_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  int64_t file_ = -1;  // hid_t of the open .tmp, -1 once closed
  uint64_t data_end_ = 0;  // the end of the last tensor data in the .tmp
  uint64_t reserved_ = 0;  // bytes of the .tmp whose disk blocks are allocated (posix_fallocate)
  std::vector<Entry> tensors_;
  std::unordered_map<std::string, size_t> entry_of_;  // name -> index in tensors_ (O(1) per tensor)
  std::map<std::string, std::string> root_attrs_;  // what metadata_checksum covers (metadata_text)
  bool committed_ = false;
  bool broken_ = false;             // an I/O step failed: the .tmp is gone, the handle abandoned
  bool incomplete_ = false;         // commit() found a tensor not wholly written
  bool failed_everywhere_ = false;  // an error was raised on every rank by agree()
};

class CheckpointReader {
 public:
  enum class AttrType { int64, float64, string, other };

  // Opens read-only: collectively through MPI-IO when comm != MPI_COMM_NULL, serially otherwise.
  // Refuses, with a clear message: a missing file, a .tmp (uncommitted) file, a file that is not
  // HDF5 or is truncated, one without format = "tessera-checkpoint", an unsupported version.
  CheckpointReader(const std::string& path, MPI_Comm comm);
  ~CheckpointReader();  // collective when opened with a comm (see ~CheckpointWriter)
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& path() const { return path_; }

  // Tensors: dataset paths such as "/params/wte.weight" (a missing leading '/' is added).
  bool has(const std::string& name) const;
  Shape shape(const std::string& name) const;
  TensorType type(const std::string& name) const;
  std::vector<std::string> tensors() const;  // every dataset path, sorted
  // Elements [begin, end) of the tensor's global flattening into out (end - begin values); an
  // independent read, any range on any rank.
  void read_range(const std::string& name, int64_t begin, int64_t end, float* out) const;
  void read_runs(const std::string& name, const std::vector<FlatRange>& runs, float* out) const;  // as write_runs
  // The integer types: the pointer's type must be the tensor's (type()); reading an integer
  // tensor into floats, or the reverse, throws naming both types.
  void read_range(const std::string& name, int64_t begin, int64_t end, int8_t* out) const;
  void read_range(const std::string& name, int64_t begin, int64_t end, uint8_t* out) const;
  void read_range(const std::string& name, int64_t begin, int64_t end, uint16_t* out) const;
  void read_range(const std::string& name, int64_t begin, int64_t end, std::nullptr_t) const {  // f32's
    read_range(name, begin, end, static_cast<float*>(nullptr));
  }

  // Root attributes. attr_int wants an integer; attr_double takes any number.
  bool has_attr(const std::string& key) const;
  std::vector<std::string> attr_keys() const;  // sorted
  AttrType attr_type(const std::string& key) const;
  int64_t attr_int(const std::string& key) const;
  double attr_double(const std::string& key) const;
  std::string attr_string(const std::string& key) const;

  // Reads every tensor whole and checks it against its "checksum" attribute; throws naming the
  // first (in sorted order) tensor whose data does not match or cannot be read. Then (version 2)
  // checks the metadata against metadata_checksum: every root attribute but format and the
  // checksum itself, and every tensor's name, shape and checksum, so a changed, added or removed
  // attribute or tensor is found too.
  void verify() const;

 private:
  std::string path_;
  bool parallel_ = false;
  int64_t file_ = -1;  // hid_t
  int64_t version_ = 0;
  void read_typed(const std::string& name, const std::vector<FlatRange>& runs, void* out, TensorType type) const;
};

}  // namespace tessera::io

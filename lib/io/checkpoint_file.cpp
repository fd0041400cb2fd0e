// Checkpoint files over the parallel HDF5 C API: collective creation and hyperslab writes of flat
// ranges, per-tensor checksums, the .tmp-then-rename commit, and serial or MPI-IO reading.
#include "io/checkpoint_file.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/test_hooks.h"
#include "core/fnv1a.h"
#include "io/hdf5_handle.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;
// `msg`, plus what HDF5 (and, for a write, the OS: errno) said; a full disk is named outright.
std::string with_detail(const std::string& msg, bool write = false) {
  const int err = write ? errno : 0;
  const std::string d = hdf5_detail(3);
  std::string out = msg;
  const bool full = err == ENOSPC || d.find("No space left") != std::string::npos ||
                    d.find("errno = 28") != std::string::npos;
  if (full) out += ": no space left on device";
  if (!d.empty()) out += " (HDF5: " + d + ")";
  return out;
}

std::string normalize(const std::string& object) { return absolute_object_path(object); }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

uint64_t mix64(uint64_t z) {  // splitmix64's finalizer: a bijection of 64-bit words
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// How ranks compare the arguments of a collective call: FNV-1a over them, a string with its end.
struct ArgHash {
  Fnv1a hash;
  uint64_t h() const { return hash.value(); }
  ArgHash& add(const std::string& s) {
    hash.add(s).add("\0", 1);
    return *this;
  }
  ArgHash& add(int64_t v) {
    hash.add_value(v);
    return *this;
  }
};

// Whether `ok` holds on every rank of comm; if not, every rank throws the message of the first
// failing rank. With args, also that every rank passed the same arguments. MPI_COMM_NULL: local.
void agree_on(MPI_Comm comm, bool ok, const std::string& message, uint64_t args, const char* op) {
  if (comm == MPI_COMM_NULL) {
    if (!ok) fail(message);
    return;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // min over ranks of: the first failing rank, the arguments' hash, its complement (= ~max).
  uint64_t v[3] = {ok ? static_cast<uint64_t>(size) : static_cast<uint64_t>(rank), args, ~args};
  MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_UINT64_T, MPI_MIN, comm);
  if (v[0] < static_cast<uint64_t>(size)) {
    const int first = static_cast<int>(v[0]);
    std::string msg = rank == first ? message : std::string();
    int len = static_cast<int>(msg.size());
    MPI_Bcast(&len, 1, MPI_INT, first, comm);
    msg.resize(static_cast<size_t>(len));
    MPI_Bcast(msg.data(), len, MPI_CHAR, first, comm);
    fail(msg, size > 1 ? " (rank " + std::to_string(first) + ")" : std::string());
  }
  if (v[1] != ~v[2])
    fail(op, " was called with different arguments on different ranks (every rank must make the same "
         "collective calls in the same order)");
}

// Runs f, turning any exception into a message for agree_on.
template <typename F>
std::string attempt(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// ---- hyperslabs ----------------------------------------------------------------------------------

struct Block {
  std::vector<hsize_t> start, count;
};

int64_t elements(const std::vector<FlatRange>& runs) {
  int64_t n = 0;
  for (const FlatRange& r : runs) n += std::max<int64_t>(0, r.end - r.begin);
  return n;
}

// Throws "<where>: range [b, e) is outside its N elements" (or out of order) for a bad run.
void check_runs(const std::vector<FlatRange>& runs, int64_t numel, const std::string& where) {
  int64_t last = 0;
  for (const FlatRange& r : runs) {
    if (!(0 <= r.begin && r.begin <= r.end && r.end <= numel))
      fail(where, ": range [", r.begin, ", ", r.end, ") is outside its ", numel, " elements");
    if (r.begin < last) fail(where, ": ranges overlap or are out of order at [", r.begin, ", ", r.end, ")");
    if (r.end > r.begin) last = r.end;
  }
}

// Elements [b, e) of the row-major flattening of dims[d..] (indices relative to that sub-array),
// whose leading indices are fixed to `prefix`, as hyperslab blocks: a partial first slab, whole
// slabs, a partial last slab, recursively. At most 3 blocks for 1-D and 2-D, 2 rank - 1 in general.
void decompose(const std::vector<int64_t>& dims, size_t d, int64_t b, int64_t e,
               std::vector<hsize_t>& prefix, std::vector<Block>& out) {
  if (b >= e) return;
  const size_t rank = dims.size();
  if (d + 1 == rank) {
    Block blk{prefix, std::vector<hsize_t>(d, 1)};
    blk.start.push_back(static_cast<hsize_t>(b));
    blk.count.push_back(static_cast<hsize_t>(e - b));
    out.push_back(std::move(blk));
    return;
  }
  int64_t inner = 1;
  for (size_t k = d + 1; k < rank; ++k) inner *= dims[k];
  const int64_t i0 = b / inner, r0 = b % inner, i1 = e / inner, r1 = e % inner;
  auto sub = [&](int64_t i, int64_t lo, int64_t hi) {
    prefix.push_back(static_cast<hsize_t>(i));
    decompose(dims, d + 1, lo, hi, prefix, out);
    prefix.pop_back();
  };
  if (i0 == i1) {  // within one slab
    sub(i0, r0, r1);
    return;
  }
  int64_t first_whole = i0;
  if (r0 != 0) {
    sub(i0, r0, inner);
    first_whole = i0 + 1;
  }
  if (i1 > first_whole) {
    Block blk{prefix, std::vector<hsize_t>(d, 1)};
    blk.start.push_back(static_cast<hsize_t>(first_whole));
    blk.count.push_back(static_cast<hsize_t>(i1 - first_whole));
    for (size_t k = d + 1; k < rank; ++k) {
      blk.start.push_back(0);
      blk.count.push_back(static_cast<hsize_t>(dims[k]));
    }
    out.push_back(std::move(blk));
  }
  if (r1 != 0) sub(i1, 0, r1);
}

// Selects the union of the runs (ranges of the flattening) in `space` (the dataset's space, extent
// `dims`); no elements selects nothing. Returns false if HDF5 refused.
bool select_runs(hid_t space, const std::vector<int64_t>& dims, const std::vector<FlatRange>& runs) {
  if (elements(runs) == 0) return H5Sselect_none(space) >= 0;
  if (dims.empty()) return H5Sselect_all(space) >= 0;  // a scalar: [0, 1)
  std::vector<Block> blocks;
  std::vector<hsize_t> prefix;
  for (const FlatRange& r : runs) decompose(dims, 0, r.begin, r.end, prefix, blocks);
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (H5Sselect_hyperslab(space, i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, blocks[i].start.data(),
                            nullptr, blocks[i].count.data(), nullptr) < 0)
      return false;
  }
  return true;
}

// A 1-D memory space of n elements, all selected (none when n is 0).
Hid memory_space(int64_t n) {
  const hsize_t dim = static_cast<hsize_t>(std::max<int64_t>(n, 1));
  Hid s(H5Screate_simple(1, &dim, nullptr), H5Sclose);
  if (s.valid() && n == 0) H5Sselect_none(s.get());
  return s;
}

// ---- tensor types --------------------------------------------------------------------------------

size_t type_size(TensorType t) {
  switch (t) {
    case TensorType::f32: return 4;
    case TensorType::u16: return 2;
    case TensorType::i8:
    case TensorType::u8: break;
  }
  return 1;
}
hid_t file_type(TensorType t) {
  switch (t) {
    case TensorType::f32: return H5T_IEEE_F32LE;
    case TensorType::i8: return H5T_STD_I8LE;
    case TensorType::u8: return H5T_STD_U8LE;
    case TensorType::u16: break;
  }
  return H5T_STD_U16LE;
}
hid_t memory_type(TensorType t) {
  switch (t) {
    case TensorType::f32: return H5T_NATIVE_FLOAT;
    case TensorType::i8: return H5T_NATIVE_INT8;
    case TensorType::u8: return H5T_NATIVE_UINT8;
    case TensorType::u16: break;
  }
  return H5T_NATIVE_UINT16;
}

// ---- attributes ----------------------------------------------------------------------------------

enum AttrKind { kInt = 0, kDouble = 1, kString = 2, kUInt = 3 };

// A scalar attribute on obj, replacing one of that name. value: int64_t*, double*, const char**
// or uint64_t* by kind. Throws with HDF5's detail.
void write_attr(hid_t obj, const std::string& where, const std::string& key, int kind, const void* value) {
  Hid str = vlen_string_type();
  hid_t ftype = H5T_STD_I64LE, mtype = H5T_NATIVE_INT64;
  if (kind == kDouble) ftype = H5T_IEEE_F64LE, mtype = H5T_NATIVE_DOUBLE;
  if (kind == kString) ftype = mtype = str.get();
  if (kind == kUInt) ftype = H5T_STD_U64LE, mtype = H5T_NATIVE_UINT64;
  write_scalar_attribute(obj, where, key, ftype, mtype, value);
}

// The text metadata_checksum is the FNV-1a of: each root attribute but format and the checksum
// itself, in key order, as key, type and exact value ("i" decimal, "d" the double's bits in hex,
// "s" the string); then each tensor, in name order, as name, shape and data checksum. The writer
// and the reader describe a file alike, so any changed, added or removed entry changes the text.
constexpr const char* kMetadataChecksum = "metadata_checksum";
std::string int_text(int64_t v) { return "i" + std::to_string(v); }
std::string double_text(double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(bits));
  return std::string("d") + hex;
}
std::string string_text(const std::string& v) { return "s" + v; }
struct TensorMeta {
  std::string name;
  Shape shape;
  uint64_t checksum;
  TensorType type = TensorType::f32;
};
uint64_t metadata_digest(const std::map<std::string, std::string>& attrs, std::vector<TensorMeta> tensors) {
  Fnv1a digest;
  for (const auto& [key, value] : attrs) digest.add(key).add("\0", 1).add(value).add("\0", 1);
  std::sort(tensors.begin(), tensors.end(), [](const TensorMeta& a, const TensorMeta& b) { return a.name < b.name; });
  for (const TensorMeta& t : tensors) {
    digest.add(t.name).add("\0", 1);
    for (int64_t d : t.shape.dims()) digest.add_value(d);
    digest.add_value(t.checksum);
    // Only a type other than f32 is part of the text, so files from before types keep their digest.
    if (t.type != TensorType::f32) digest.add(tensor_type_name(t.type)).add("\0", 1);
  }
  return digest.value();
}

}  // namespace

uint64_t checkpoint_checksum(const float* data, int64_t begin, int64_t end) {
  return checkpoint_checksum(data, TensorType::f32, begin, end);
}

const char* tensor_type_name(TensorType type) {
  switch (type) {
    case TensorType::f32: return "f32";
    case TensorType::i8: return "int8";
    case TensorType::u8: return "uint8";
    case TensorType::u16: break;
  }
  return "uint16";
}

uint64_t checkpoint_checksum(const void* data, TensorType type, int64_t begin, int64_t end) {
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
  const auto* bytes = static_cast<const unsigned char*>(data);
  const size_t size = type_size(type);
  uint64_t sum = 0;
  for (int64_t i = begin; i < end; ++i) {
    uint64_t bits = 0;
    if (size == 4) {
      uint32_t b;
      std::memcpy(&b, bytes + (i - begin) * 4, 4);
      bits = b;
    } else if (size == 2) {
      uint16_t b;
      std::memcpy(&b, bytes + (i - begin) * 2, 2);
      bits = b;
    } else {
      bits = bytes[i - begin];
    }
    sum += mix64(bits ^ (static_cast<uint64_t>(i) * kGolden));
  }
  return sum;
}

// ---- CheckpointWriter ----------------------------------------------------------------------------

CheckpointWriter::CheckpointWriter(const std::string& final_path, MPI_Comm comm)
    : final_path_(final_path), tmp_path_(final_path + ".tmp"), comm_(comm) {
  silence_hdf5();
  if (comm_ != MPI_COMM_NULL) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  const std::string err = attempt([&] {
    TESSERA_CHECK(!final_path_.empty(), "cannot write a checkpoint: empty path");
    TESSERA_CHECK(!ends_with(final_path_, ".tmp"), "cannot write checkpoint ", final_path_,
                  ": the name must not end in .tmp (reserved for checkpoints being written)");
    const fs::path parent = fs::path(final_path_).parent_path();
    std::error_code ec;
    if (!parent.empty() && !fs::is_directory(parent, ec))
      fail("cannot write checkpoint ", final_path_, ": directory ", parent.string(), " does not exist");
    if (fs::is_directory(final_path_, ec)) fail("cannot write checkpoint ", final_path_, ": it is a directory");
  });
  agree_on(comm_, err.empty(), err, ArgHash().add(final_path_).h(), "CheckpointWriter");

  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (comm_ != MPI_COMM_NULL) {
    H5Pset_fapl_mpio(fapl.get(), comm_, MPI_INFO_NULL);
    H5Pset_coll_metadata_write(fapl.get(), true);
  }
  file_ = H5Fcreate(tmp_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  const bool created = file_ >= 0;
  const std::string create_err = created ? "" : with_detail("cannot create checkpoint " + tmp_path_);
  try {
    agree_on(comm_, created, create_err, 0, "CheckpointWriter");
  } catch (...) {
    // Some ranks may hold the file open; closing is collective, so they leave it to process exit.
    if (comm_ == MPI_COMM_NULL && file_ >= 0) H5Fclose(file_);
    if (rank_ == 0) {
      std::error_code ec;
      fs::remove(tmp_path_, ec);
    }
    throw;
  }
  const int64_t version = kCheckpointVersion;
  write_root_attr("version", kInt, &version);  // on failure, agree() has discarded the .tmp
}

CheckpointWriter::~CheckpointWriter() {
  if (committed_ || broken_) return;  // after an I/O failure, agree() already discarded the .tmp
  // With an exception in flight that this class did not raise on every rank, peers may be elsewhere:
  // a collective close could wait forever, so the handle is abandoned (the job is about to abort).
  const bool everyone_here = comm_ == MPI_COMM_NULL || std::uncaught_exceptions() == 0 || failed_everywhere_;
  if (everyone_here) close_file();
  else file_ = -1;
  if (rank_ == 0) {
    std::error_code ec;
    fs::remove(tmp_path_, ec);
  }
  if (everyone_here && comm_ != MPI_COMM_NULL) MPI_Barrier(comm_);  // the .tmp is gone on return
}

void CheckpointWriter::close_file() noexcept {
  if (file_ >= 0) H5Fclose(file_);
  file_ = -1;
  H5Eclear2(H5E_DEFAULT);
}

void CheckpointWriter::agree(bool ok, const std::string& message, uint64_t args, Failure kind) {
  try {
    agree_on(comm_, ok, message, args, "a CheckpointWriter method");
  } catch (...) {
    failed_everywhere_ = true;
    if (kind != Failure::args && !broken_) discard_after_failure(kind == Failure::hdf5);
    throw;
  }
}

// After an I/O failure, with every rank here: rank 0 truncates the .tmp to nothing first (giving
// its disk space back, so that what the close still writes finds room), the file is closed, and
// the .tmp removed. Where HDF5 itself failed a write, flush or close, the handle is abandoned
// instead of closed: HDF5 1.10's parallel close then diverges between ranks (some wait in a
// barrier, others in a broadcast) or crashes. Failures met by reserve_space leave HDF5 sound.
void CheckpointWriter::discard_after_failure(bool hdf5_failed) noexcept {
  broken_ = true;
  if (rank_ == 0) {
    if (::truncate(tmp_path_.c_str(), 0) != 0) {
      // nothing to give back (already gone, or closed and renamed)
    }
  }
  if (comm_ != MPI_COMM_NULL) MPI_Barrier(comm_);
  if (hdf5_failed) file_ = -1;
  else close_file();
  if (rank_ == 0) {
    std::error_code ec;
    fs::remove(tmp_path_, ec);
  }
  if (comm_ != MPI_COMM_NULL) MPI_Barrier(comm_);
}

void CheckpointWriter::check_usable(const char* op) const {
  if (committed_) fail("writing checkpoint ", final_path_, ": ", op, " after commit()");
  if (incomplete_) fail("writing checkpoint ", final_path_, ": ", op, " after commit() found tensors not fully written");
  if (broken_ || file_ < 0)
    fail("writing checkpoint ", final_path_, ": ", op, " after an earlier write error (the checkpoint cannot be completed)");
}

CheckpointWriter::Entry& CheckpointWriter::entry(const std::string& name) {
  const std::string n = normalize(name);
  const auto it = entry_of_.find(n);
  if (it == entry_of_.end()) fail("writing checkpoint ", final_path_, ": no tensor ", n, " (create() it first)");
  return tensors_[it->second];
}

void CheckpointWriter::write_root_attr(const std::string& key, int kind, const void* value) {
  if (key != "format" && key != kMetadataChecksum)
    root_attrs_[key] = kind == kInt      ? int_text(*static_cast<const int64_t*>(value))
                       : kind == kDouble ? double_text(*static_cast<const double*>(value))
                                         : string_text(*static_cast<const char* const*>(value));
  const std::string err = attempt([&] {
    Hid root(H5Oopen(file_, "/", H5P_DEFAULT), H5Oclose);
    if (!root.valid()) fail(with_detail("writing checkpoint " + tmp_path_ + ": cannot open the root group"));
    write_attr(root.get(), "writing checkpoint " + tmp_path_, key, kind, value);
  });
  agree(err.empty(), err, 0, Failure::hdf5);
}

// Rank 0 allocates the disk blocks of the .tmp up to byte `end` (posix_fallocate), so that HDF5's
// later writes below it cannot fail for want of space: a full disk (or quota, or file size limit)
// is met here, in one call of ours, before HDF5 has written anything there, and raised on every
// rank at once. HDF5 1.10 does not survive a failed write in parallel: its ranks diverge inside
// its own collectives (observed: a hang in H5Fclose/H5Fflush, a crash at MPI_Finalize).
// past_eof: the range may lie past HDF5's end of file (the metadata yet to come), so the file's size
// is left alone (FALLOC_FL_KEEP_SIZE): where that is unsupported, nothing is reserved.
void CheckpointWriter::reserve_space(uint64_t end, const std::string& what, bool past_eof) {
  const std::string err = attempt([&] {
    if (rank_ != 0 || end <= reserved_) return;
    const int fd = ::open(tmp_path_.c_str(), O_WRONLY);
    if (fd < 0) fail("writing checkpoint ", tmp_path_, ": cannot open to reserve space: ", std::strerror(errno));
    const auto from = static_cast<off_t>(reserved_), len = static_cast<off_t>(end - reserved_);
    int rc = 0;
    const int64_t limit = test_hooks().checkpoint_disk_limit_bytes;  // a disk this small
    if (limit >= 0 && end > static_cast<uint64_t>(limit)) {
      rc = ENOSPC;
    } else if (!past_eof) {
      rc = ::posix_fallocate(fd, from, len);
    } else if (::fallocate(fd, FALLOC_FL_KEEP_SIZE, from, len) != 0) {
      rc = errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL ? 0 : errno;
    }
    ::close(fd);
    if (rc == ENOSPC || rc == EDQUOT)
      fail("writing checkpoint ", final_path_, rc == ENOSPC ? ": no space left on device (" : ": disk quota exceeded (",
           end - reserved_, " more bytes of ", tmp_path_, " needed for ", what, ")");
    if (rc != 0)
      fail("writing checkpoint ", final_path_, ": cannot reserve ", end - reserved_, " more bytes of ", tmp_path_,
           " for ", what, ": ", std::strerror(rc));
  });
  agree(err.empty(), err, 0, Failure::disk);
  reserved_ = std::max(reserved_, end);
}

void CheckpointWriter::create(const std::string& name, const Shape& global_shape, TensorType type) {
  const std::string n = normalize(name);
  ArgHash args;
  args.add("create").add(n).add(static_cast<int64_t>(type));
  for (int64_t d : global_shape.dims()) args.add(d);
  const std::string bad = attempt([&] {
    check_usable("create");
    TESSERA_CHECK(n != "/", "writing checkpoint ", final_path_, ": a tensor needs a name");
    TESSERA_CHECK(!entry_of_.count(n), "writing checkpoint ", final_path_, ": tensor ", n, " created twice");
    for (int64_t d : global_shape.dims())
      TESSERA_CHECK(d >= 0, "writing checkpoint ", final_path_, ": tensor ", n, " has a negative extent in ",
                    global_shape.str());
  });
  agree(bad.empty(), bad, args.h(), Failure::args);

  uint64_t data_end = 0;  // where the tensor's data ends in the file (the same on every rank)
  const std::string err = attempt([&] {
    const std::vector<int64_t>& dims = global_shape.dims();
    Hid space;
    if (dims.empty()) {
      space = Hid(H5Screate(H5S_SCALAR), H5Sclose);
    } else {
      const std::vector<hsize_t> hd(dims.begin(), dims.end());
      space = Hid(H5Screate_simple(static_cast<int>(hd.size()), hd.data(), nullptr), H5Sclose);
    }
    Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_create_intermediate_group(lcpl.get(), 1);
    // Contiguous, allocated at creation, never filled: every element is written by some rank.
    Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
    Hid d(H5Dcreate2(file_, n.c_str(), file_type(type), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
          H5Dclose);
    if (!d.valid()) fail(with_detail("writing checkpoint " + tmp_path_ + ": cannot create tensor " + n));
    const haddr_t offset = H5Dget_offset(d.get());  // undefined for a tensor without elements
    if (offset != HADDR_UNDEF) data_end = static_cast<uint64_t>(offset) + H5Dget_storage_size(d.get());
    H5Eclear2(H5E_DEFAULT);
  });
  agree(err.empty(), err, 0, Failure::hdf5);
  entry_of_.emplace(n, tensors_.size());
  tensors_.push_back(Entry{n, global_shape, type, 0, 0});
  data_end_ = std::max(data_end_, data_end);
  reserve_space(data_end_, "tensor " + n, false);
}

void CheckpointWriter::write_range(const std::string& name, int64_t begin, int64_t end, const float* data) {
  write_runs(name, {{begin, end}}, data);
}

void CheckpointWriter::write_runs(const std::string& name, const std::vector<FlatRange>& runs, const float* data) {
  write_typed(name, runs, data, TensorType::f32);
}
void CheckpointWriter::write_range(const std::string& name, int64_t begin, int64_t end, const int8_t* data) {
  write_typed(name, {{begin, end}}, data, TensorType::i8);
}
void CheckpointWriter::write_range(const std::string& name, int64_t begin, int64_t end, const uint8_t* data) {
  write_typed(name, {{begin, end}}, data, TensorType::u8);
}
void CheckpointWriter::write_range(const std::string& name, int64_t begin, int64_t end, const uint16_t* data) {
  write_typed(name, {{begin, end}}, data, TensorType::u16);
}

void CheckpointWriter::write_typed(const std::string& name, const std::vector<FlatRange>& runs, const void* data,
                                   TensorType type) {
  const std::string n = normalize(name);
  Entry* t = nullptr;
  const int64_t count = elements(runs);
  const std::string bad = attempt([&] {
    check_usable("write_range");
    t = &entry(n);
    check_runs(runs, t->shape.numel(), "writing checkpoint " + final_path_ + ": tensor " + n + " " + t->shape.str());
    TESSERA_CHECK(count == 0 || data != nullptr, "writing checkpoint ", final_path_, ": tensor ", n,
                  ": no data for ", count, " elements");
    TESSERA_CHECK(t->type == type, "writing checkpoint ", final_path_, ": tensor ", n, " is ",
                  tensor_type_name(t->type), ", written as ", tensor_type_name(type));
  });
  agree(bad.empty(), bad, ArgHash().add("write_range").add(n).h(), Failure::args);

  if (t->shape.numel() == 0) return;  // no storage to write to (the same on every rank)
  const std::string err = attempt([&] {
    const std::string where = "writing checkpoint " + tmp_path_ + ": tensor " + n;
    Hid d(H5Dopen2(file_, n.c_str(), H5P_DEFAULT), H5Dclose);
    if (!d.valid()) fail(with_detail(where + ": cannot open"));
    Hid fspace(H5Dget_space(d.get()), H5Sclose);
    Hid mspace = memory_space(count);
    if (!fspace.valid() || !mspace.valid() || !select_runs(fspace.get(), t->shape.dims(), runs))
      fail(with_detail(where + ": cannot select its " + std::to_string(runs.size()) + " range(s)"));
    Hid dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
    if (comm_ != MPI_COMM_NULL) H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE);
    const float dummy = 0;
    errno = 0;
    if (H5Dwrite(d.get(), memory_type(type), mspace.get(), fspace.get(), dxpl.get(), count > 0 ? data : &dummy) < 0)
      fail(with_detail(where + ": write failed", true));
  });
  agree(err.empty(), err, 0, Failure::hdf5);
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (const FlatRange& r : runs) {
    t->checksum += checkpoint_checksum(bytes, type, r.begin, r.end);
    bytes += (r.end - r.begin) * type_size(type);
  }
  t->written += static_cast<uint64_t>(count);
}

void CheckpointWriter::check_attr_name(const std::string& key) const {
  check_usable("set_attr");
  TESSERA_CHECK(!key.empty() && key != "format" && key != "version", "writing checkpoint ", final_path_,
                ": attribute name '", key, "' is reserved or empty");
}

void CheckpointWriter::set_attr(const std::string& key, int64_t v) {
  const std::string bad = attempt([&] {
    check_attr_name(key);
  });
  agree(bad.empty(), bad, ArgHash().add("set_attr int").add(key).h(), Failure::args);
  if (comm_ != MPI_COMM_NULL) MPI_Bcast(&v, 1, MPI_INT64_T, 0, comm_);
  write_root_attr(key, kInt, &v);
}

void CheckpointWriter::set_attr(const std::string& key, double v) {
  const std::string bad = attempt([&] {
    check_attr_name(key);
  });
  agree(bad.empty(), bad, ArgHash().add("set_attr double").add(key).h(), Failure::args);
  if (comm_ != MPI_COMM_NULL) MPI_Bcast(&v, 1, MPI_DOUBLE, 0, comm_);
  write_root_attr(key, kDouble, &v);
}

void CheckpointWriter::set_attr(const std::string& key, const std::string& v) {
  const std::string bad = attempt([&] {
    check_attr_name(key);
    TESSERA_CHECK(v.find('\0') == std::string::npos, "writing checkpoint ", final_path_, ": attribute ", key,
                  " holds a NUL character");
  });
  agree(bad.empty(), bad, ArgHash().add("set_attr string").add(key).h(), Failure::args);
  std::string value = v;
  if (comm_ != MPI_COMM_NULL) {
    int64_t len = static_cast<int64_t>(value.size());
    MPI_Bcast(&len, 1, MPI_INT64_T, 0, comm_);
    value.resize(static_cast<size_t>(len));
    MPI_Bcast(value.data(), static_cast<int>(len), MPI_CHAR, 0, comm_);
  }
  const char* p = value.c_str();
  write_root_attr(key, kString, &p);
}

void CheckpointWriter::commit() {
  const std::string bad = attempt([&] { check_usable("commit"); });
  agree(bad.empty(), bad, ArgHash().add("commit").add(static_cast<int64_t>(tensors_.size())).h(), Failure::args);

  // Whole-tensor checksums and element counts: the sums of every rank's partial ones.
  const size_t n = tensors_.size();
  std::vector<uint64_t> sums(2 * n);
  for (size_t i = 0; i < n; ++i) {
    sums[i] = tensors_[i].checksum;
    sums[n + i] = tensors_[i].written;
  }
  if (comm_ != MPI_COMM_NULL && n > 0)
    MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(2 * n), MPI_UINT64_T, MPI_SUM, comm_);
  for (size_t i = 0; i < n; ++i) {
    const auto numel = static_cast<uint64_t>(tensors_[i].shape.numel());
    if (sums[n + i] != numel) {  // the same sums on every rank: every rank throws here
      failed_everywhere_ = incomplete_ = true;
      fail("writing checkpoint ", final_path_, ": tensor ", tensors_[i].name, " ", tensors_[i].shape.str(),
           ": the ranks wrote ", sums[n + i], " of its ", numel, " elements (",
           sums[n + i] < numel ? "missing" : "overlapping", " ranges); not committed");
    }
  }

  // Checksums, then "format" last of all, then everything to disk.
  std::string err = attempt([&] {
    for (size_t i = 0; i < n; ++i) {
      const std::string where = "writing checkpoint " + tmp_path_ + ": tensor " + tensors_[i].name;
      Hid d(H5Oopen(file_, tensors_[i].name.c_str(), H5P_DEFAULT), H5Oclose);
      if (!d.valid()) fail(with_detail(where + ": cannot open"));
      write_attr(d.get(), where, "checksum", kUInt, &sums[i]);
    }
  });
  agree(err.empty(), err, 0, Failure::hdf5);
  std::vector<TensorMeta> meta;
  for (size_t i = 0; i < n; ++i) meta.push_back({tensors_[i].name, tensors_[i].shape, sums[i], tensors_[i].type});
  const uint64_t metadata = metadata_digest(root_attrs_, std::move(meta));
  write_root_attr(kMetadataChecksum, kUInt, &metadata);
  const char* format = kCheckpointFormat;
  write_root_attr("format", kString, &format);
  // The metadata still to be written lies below the last tensor's data or just past it; what this
  // over-reserves is released after the close.
  reserve_space(data_end_ + (64 << 10) + 4096 * static_cast<uint64_t>(n), "the metadata", true);
  err = attempt([&] {
    errno = 0;
    if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) fail(with_detail("writing checkpoint " + tmp_path_ + ": flush failed", true));
  });
  agree(err.empty(), err, 0, Failure::hdf5);
  err = attempt([&] {
    errno = 0;
    const herr_t closed = H5Fclose(file_);
    file_ = -1;
    if (closed < 0) fail(with_detail("writing checkpoint " + tmp_path_ + ": close failed", true));
  });
  agree(err.empty(), err, 0, Failure::hdf5);
  err = attempt([&] {  // each rank pushes its own node's cached pages of the file to disk
    // Rank 0 first gives back the blocks reserved past the end (a truncate to the same size).
    if (rank_ == 0) {
      std::error_code ec;
      const auto size = fs::file_size(tmp_path_, ec);
      if (!ec && ::truncate(tmp_path_.c_str(), static_cast<off_t>(size)) != 0) {
        // best effort: the blocks merely stay reserved
      }
    }
    const int fd = ::open(tmp_path_.c_str(), O_RDONLY);
    if (fd < 0) fail("writing checkpoint ", tmp_path_, ": cannot reopen for fsync: ", std::strerror(errno));
    const int rc = ::fsync(fd);
    const int e = errno;
    ::close(fd);
    if (rc != 0) fail("writing checkpoint ", tmp_path_, ": fsync failed: ", std::strerror(e));
  });
  agree(err.empty(), err, 0, Failure::disk);

  if (test_hooks().crash_before_checkpoint_rename) std::raise(SIGKILL);

  err = attempt([&] {
    if (rank_ != 0) return;
    if (std::rename(tmp_path_.c_str(), final_path_.c_str()) != 0)
      fail("writing checkpoint ", final_path_, ": cannot rename ", tmp_path_, ": ", std::strerror(errno));
    // The rename itself reaches the disk with the directory.
    const fs::path parent = fs::path(final_path_).parent_path();
    const int dfd = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  });
  agree(err.empty(), err, 0, Failure::disk);  // also the barrier: the final file exists on return
  committed_ = true;
}

// ---- CheckpointReader ----------------------------------------------------------------------------

namespace {
// The reader's view of a dataset: open, with its extent.
struct OpenTensor {
  Hid dataset, space;
  std::vector<int64_t> dims;
  int64_t numel = 1;
  TensorType type = TensorType::f32;
};

OpenTensor open_tensor(hid_t file, const std::string& path, const std::string& n, bool exists) {
  if (!exists) fail(path, ": no tensor ", n);
  OpenTensor t;
  t.dataset = Hid(H5Dopen2(file, n.c_str(), H5P_DEFAULT), H5Dclose);
  if (!t.dataset.valid()) fail(with_detail(path + ": cannot open tensor " + n));
  t.space = Hid(H5Dget_space(t.dataset.get()), H5Sclose);
  if (!t.space.valid()) fail(with_detail(path + ": tensor " + n + ": cannot read its extent"));
  t.dims = dataspace_dims(t.space.get());
  for (int64_t d : t.dims) t.numel *= d;
  Hid type(H5Dget_type(t.dataset.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  const size_t size = H5Tget_size(type.get());
  if (cls == H5T_FLOAT && size == 4) {
    t.type = TensorType::f32;
  } else if (cls == H5T_INTEGER && size == 1) {
    t.type = H5Tget_sign(type.get()) == H5T_SGN_2 ? TensorType::i8 : TensorType::u8;
  } else if (cls == H5T_INTEGER && size == 2 && H5Tget_sign(type.get()) == H5T_SGN_NONE) {
    t.type = TensorType::u16;
  } else {
    fail(path, ": tensor ", n, " is not stored as 32-bit floating point (nor as the 8- or 16-bit integers of a ",
         "quantised checkpoint)");
  }
  // The writer makes contiguous datasets holding every element: anything else (chunks, filters, an
  // extent larger than the data behind it) is a damaged or foreign file, refused before HDF5 sizes
  // buffers from its claims.
  Hid dcpl(H5Dget_create_plist(t.dataset.get()), H5Pclose);
  if (!dcpl.valid() || H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS)
    fail(path, ": tensor ", n, " is not stored contiguously (not a tessera checkpoint, or damaged)");
  const uint64_t stored = H5Dget_storage_size(t.dataset.get());
  if (stored != static_cast<uint64_t>(t.numel) * type_size(t.type))
    fail(path, ": tensor ", n, " ", Shape(t.dims).str(), " has ", stored, " bytes of data for ", t.numel,
         " elements (damaged)");
  H5Eclear2(H5E_DEFAULT);
  return t;
}

struct AttrHandle {
  Hid attr, type;
};

AttrHandle open_root_attr(hid_t file, const std::string& path, const std::string& key) {
  const htri_t present = H5Aexists_by_name(file, "/", key.c_str(), H5P_DEFAULT);
  if (present <= 0) {
    H5Eclear2(H5E_DEFAULT);
    fail(path, ": no attribute ", key);
  }
  AttrHandle a;
  a.attr = Hid(H5Aopen_by_name(file, "/", key.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.attr.valid()) fail(with_detail(path + ": cannot open attribute " + key));
  a.type = Hid(H5Aget_type(a.attr.get()), H5Tclose);
  Hid space(H5Aget_space(a.attr.get()), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.get()) != 1) fail(path, ": attribute ", key, " is not a single value");
  return a;
}

std::string read_string_attr(const AttrHandle& a, const std::string& path, const std::string& key) {
  if (H5Tget_class(a.type.get()) != H5T_STRING) fail(path, ": attribute ", key, " is not a string");
  std::string s;
  if (!read_string_attribute(a.attr.get(), a.type.get(), s)) fail(with_detail(path + ": cannot read attribute " + key));
  return s;
}
}  // namespace

CheckpointReader::CheckpointReader(const std::string& path, MPI_Comm comm)
    : path_(path), parallel_(comm != MPI_COMM_NULL) {
  silence_hdf5();
  const std::string err = attempt([&] {
    if (ends_with(path, ".tmp"))
      fail("cannot open checkpoint ", path, ": a .tmp file is an uncommitted checkpoint (its writer did not "
           "finish), never a valid one");
    std::error_code ec;
    if (!fs::exists(path, ec)) fail("cannot open checkpoint ", path, ": no such file");
    if (fs::is_directory(path, ec)) fail("cannot open checkpoint ", path, ": it is a directory");
    if (!std::ifstream(path, std::ios::binary).good()) fail("cannot open checkpoint ", path, ": not readable");
    if (fs::file_size(path, ec) == 0) fail("cannot open checkpoint ", path, ": not an HDF5 file (it is empty)");
    const htri_t is_h5 = H5Fis_hdf5(path.c_str());
    if (is_h5 == 0) fail("cannot open checkpoint ", path, ": not an HDF5 file");
    if (is_h5 < 0) fail(with_detail("cannot open checkpoint " + path));
    if (const std::string problem = superblock_problem(path); !problem.empty())
      fail("cannot open checkpoint ", path, ": ", problem);
  });
  agree_on(comm, err.empty(), err, ArgHash().add(path).h(), "CheckpointReader");

  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (parallel_) H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL);
  file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
  std::string open_err;
  if (file_ < 0) {
    const std::string d = hdf5_detail(3);
    const bool truncated = d.find("truncated") != std::string::npos;
    open_err = "cannot open checkpoint " + path + (truncated ? ": the file is truncated" : ": corrupt HDF5 file") +
               (d.empty() ? "" : " (HDF5: " + d + ")");
  }
  agree_on(comm, file_ >= 0, open_err, 0, "CheckpointReader");  // (a partial open is left to exit)

  // Every rank reads the same attributes and so reaches the same verdict.
  const std::string format_err = attempt([&] {
    const htri_t has_format = H5Aexists_by_name(file_, "/", "format", H5P_DEFAULT);
    H5Eclear2(H5E_DEFAULT);
    if (has_format <= 0)
      fail(path, " is not a tessera checkpoint (no format attribute: not written by tessera, or its writer did "
           "not finish)");
    const AttrHandle f = open_root_attr(file_, path, "format");
    const std::string format =
        H5Tget_class(f.type.get()) == H5T_STRING ? read_string_attr(f, path, "format") : std::string("?");
    if (format != kCheckpointFormat)
      fail(path, " is not a tessera checkpoint (format is '", format, "', expected '", kCheckpointFormat, "')");
    const AttrHandle v = open_root_attr(file_, path, "version");
    int64_t version = -1;
    if (H5Tget_class(v.type.get()) != H5T_INTEGER || H5Aread(v.attr.get(), H5T_NATIVE_INT64, &version) < 0)
      fail(path, ": the version attribute is not an integer");
    if (version < 1 || version > kCheckpointVersion)
      fail(path, ": unsupported checkpoint version ", version, " (this build reads versions 1 to ", kCheckpointVersion,
           ")");
    version_ = version;
  });
  if (!format_err.empty()) {
    H5Fclose(file_);  // every rank is here (the same file gives the same verdict), so closing is safe
    file_ = -1;
    H5Eclear2(H5E_DEFAULT);
    fail(format_err);
  }
}

CheckpointReader::~CheckpointReader() {
  if (file_ < 0) return;
  if (parallel_ && std::uncaught_exceptions() > 0) return;  // a collective close could hang (see header)
  H5Fclose(file_);
  H5Eclear2(H5E_DEFAULT);
}

bool CheckpointReader::has(const std::string& name) const {
  const std::string n = normalize(name);
  if (n == "/") return false;
  size_t pos = 0;
  while (true) {
    pos = n.find('/', pos + 1);
    const std::string prefix = n.substr(0, pos);
    if (H5Lexists(file_, prefix.c_str(), H5P_DEFAULT) <= 0 ||
        H5Oexists_by_name(file_, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (pos == std::string::npos) break;
  }
  Hid o(H5Oopen(file_, n.c_str(), H5P_DEFAULT), H5Oclose);
  H5Eclear2(H5E_DEFAULT);
  return o.valid() && H5Iget_type(o.get()) == H5I_DATASET;
}

Shape CheckpointReader::shape(const std::string& name) const {
  const std::string n = normalize(name);
  return Shape(open_tensor(file_, path_, n, has(n)).dims);
}

TensorType CheckpointReader::type(const std::string& name) const {
  const std::string n = normalize(name);
  return open_tensor(file_, path_, n, has(n)).type;
}

std::vector<std::string> CheckpointReader::tensors() const {
  std::vector<std::string> names;
  const herr_t rc = H5Lvisit(
      file_, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t group, const char* name, const H5L_info_t* info, void* data) -> herr_t {
        if (info->type != H5L_TYPE_HARD) return 0;
        Hid o(H5Oopen(group, name, H5P_DEFAULT), H5Oclose);
        if (o.valid() && H5Iget_type(o.get()) == H5I_DATASET) {
          std::string full(1, '/');
          full.append(name);
          static_cast<std::vector<std::string>*>(data)->push_back(std::move(full));
        }
        return 0;
      },
      &names);
  if (rc < 0) fail(with_detail(path_ + ": cannot list the tensors"));
  std::sort(names.begin(), names.end());
  return names;
}

void CheckpointReader::read_range(const std::string& name, int64_t begin, int64_t end, float* out) const {
  read_runs(name, {{begin, end}}, out);
}

void CheckpointReader::read_runs(const std::string& name, const std::vector<FlatRange>& runs, float* out) const {
  read_typed(name, runs, out, TensorType::f32);
}
void CheckpointReader::read_range(const std::string& name, int64_t begin, int64_t end, int8_t* out) const {
  read_typed(name, {{begin, end}}, out, TensorType::i8);
}
void CheckpointReader::read_range(const std::string& name, int64_t begin, int64_t end, uint8_t* out) const {
  read_typed(name, {{begin, end}}, out, TensorType::u8);
}
void CheckpointReader::read_range(const std::string& name, int64_t begin, int64_t end, uint16_t* out) const {
  read_typed(name, {{begin, end}}, out, TensorType::u16);
}

void CheckpointReader::read_typed(const std::string& name, const std::vector<FlatRange>& runs, void* out,
                                  TensorType type) const {
  const std::string n = normalize(name);
  const OpenTensor t = open_tensor(file_, path_, n, has(n));
  if (t.type != type)
    fail(path_, ": tensor ", n, " is stored as ", tensor_type_name(t.type), ", read as ", tensor_type_name(type),
         t.type != TensorType::f32 ? " (a quantised checkpoint's tensor: only inference reads it)" : "");
  check_runs(runs, t.numel, path_ + ": tensor " + n + " " + Shape(t.dims).str());
  const int64_t count = elements(runs);
  if (count == 0) return;
  TESSERA_CHECK(out != nullptr, path_, ": tensor ", n, ": read_range into a null buffer");
  Hid mspace = memory_space(count);
  if (!mspace.valid() || !select_runs(t.space.get(), t.dims, runs))
    fail(with_detail(path_ + ": tensor " + n + ": cannot select its range"));
  Hid dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  if (parallel_) H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_INDEPENDENT);
  if (H5Dread(t.dataset.get(), memory_type(type), mspace.get(), t.space.get(), dxpl.get(), out) < 0)
    fail(with_detail(path_ + ": tensor " + n + ": cannot read [" + std::to_string(runs.front().begin) + ", " +
                     std::to_string(runs.back().end) + ")"));
}

bool CheckpointReader::has_attr(const std::string& key) const {
  const htri_t r = H5Aexists_by_name(file_, "/", key.c_str(), H5P_DEFAULT);
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

std::vector<std::string> CheckpointReader::attr_keys() const {
  std::vector<std::string> keys;
  hsize_t idx = 0;
  const herr_t rc = H5Aiterate_by_name(
      file_, "/", H5_INDEX_NAME, H5_ITER_INC, &idx,
      [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->emplace_back(name);
        return 0;
      },
      &keys, H5P_DEFAULT);
  if (rc < 0) fail(with_detail(path_ + ": cannot list the root attributes"));
  std::sort(keys.begin(), keys.end());
  return keys;
}

CheckpointReader::AttrType CheckpointReader::attr_type(const std::string& key) const {
  const AttrHandle a = open_root_attr(file_, path_, key);
  switch (H5Tget_class(a.type.get())) {
    case H5T_INTEGER: return AttrType::int64;
    case H5T_FLOAT: return AttrType::float64;
    case H5T_STRING: return AttrType::string;
    default: return AttrType::other;
  }
}

int64_t CheckpointReader::attr_int(const std::string& key) const {
  const AttrHandle a = open_root_attr(file_, path_, key);
  if (H5Tget_class(a.type.get()) != H5T_INTEGER) fail(path_, ": attribute ", key, " is not an integer");
  int64_t v = 0;
  if (H5Aread(a.attr.get(), H5T_NATIVE_INT64, &v) < 0) fail(with_detail(path_ + ": cannot read attribute " + key));
  return v;
}

double CheckpointReader::attr_double(const std::string& key) const {
  const AttrHandle a = open_root_attr(file_, path_, key);
  const H5T_class_t cls = H5Tget_class(a.type.get());
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) fail(path_, ": attribute ", key, " is not a number");
  double v = 0;
  if (H5Aread(a.attr.get(), H5T_NATIVE_DOUBLE, &v) < 0) fail(with_detail(path_ + ": cannot read attribute " + key));
  return v;
}

std::string CheckpointReader::attr_string(const std::string& key) const {
  return read_string_attr(open_root_attr(file_, path_, key), path_, key);
}

void CheckpointReader::verify() const {
  constexpr int64_t kChunk = int64_t{1} << 22;  // elements per read: 16 MiB of floats
  std::vector<unsigned char> buf;
  std::vector<TensorMeta> meta;
  for (const std::string& n : tensors()) {
    uint64_t stored = 0;
    {
      const OpenTensor t = open_tensor(file_, path_, n, true);
      const htri_t present = H5Aexists(t.dataset.get(), "checksum");
      H5Eclear2(H5E_DEFAULT);
      if (present <= 0) fail(path_, ": tensor ", n, " has no checksum attribute (the file is damaged)");
      Hid a(H5Aopen(t.dataset.get(), "checksum", H5P_DEFAULT), H5Aclose);
      Hid type(a.valid() ? H5Aget_type(a.get()) : -1, H5Tclose);
      if (!a.valid() || H5Tget_class(type.get()) != H5T_INTEGER || H5Aread(a.get(), H5T_NATIVE_UINT64, &stored) < 0)
        fail(with_detail(path_ + ": tensor " + n + ": cannot read its checksum attribute"));
    }
    const int64_t numel = shape(n).numel();
    const TensorType tt = type(n);
    uint64_t sum = 0;
    for (int64_t b = 0; b < numel; b += kChunk) {
      const int64_t e = std::min(numel, b + kChunk);
      buf.resize(static_cast<size_t>(e - b) * type_size(tt));
      try {
        read_typed(n, {{b, e}}, buf.data(), tt);
      } catch (const Error& ex) {
        fail(path_, ": tensor ", n, " is corrupt: ", ex.what());
      }
      sum += checkpoint_checksum(buf.data(), tt, b, e);
    }
    if (sum != stored) {
      char msg[96];
      std::snprintf(msg, sizeof msg, "stored %016llx, data gives %016llx", static_cast<unsigned long long>(stored),
                    static_cast<unsigned long long>(sum));
      fail(path_, ": tensor ", n, " is corrupt: checksum mismatch (", msg, ")");
    }
    meta.push_back({n, shape(n), stored, tt});
  }
  if (version_ < 2) return;  // written before the metadata had a checksum
  if (!has_attr(kMetadataChecksum))
    fail(path_, ": no ", kMetadataChecksum, " attribute (the file is damaged)");
  std::map<std::string, std::string> attrs;
  for (const std::string& key : attr_keys()) {
    if (key == "format" || key == kMetadataChecksum) continue;
    const AttrType type = attr_type(key);
    attrs[key] = type == AttrType::int64     ? int_text(attr_int(key))
                 : type == AttrType::float64 ? double_text(attr_double(key))
                 : type == AttrType::string  ? string_text(attr_string(key))
                                             : std::string("?");  // a type tessera never writes
  }
  uint64_t stored = 0;
  {
    const AttrHandle a = open_root_attr(file_, path_, kMetadataChecksum);
    if (H5Tget_class(a.type.get()) != H5T_INTEGER || H5Aread(a.attr.get(), H5T_NATIVE_UINT64, &stored) < 0)
      fail(path_, ": cannot read its ", kMetadataChecksum, " attribute");
  }
  if (metadata_digest(attrs, std::move(meta)) != stored)
    fail(path_, ": its metadata is damaged: the root attributes or the set of tensors and their shapes do not match",
         " their checksum (an attribute or a tensor was changed, added or removed)");
}

}  // namespace tessera::io

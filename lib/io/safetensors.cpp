// safetensors reading (mmap, every header field checked before use) and writing, and the
// f16/bf16 <-> f32 element conversions.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessera::io {
namespace {

using json = nlohmann::json;

uint32_t f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float bits_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));  // inf, NaN (payload kept)
  if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
  const float v = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal: exact
  return sign ? -v : v;
}

uint16_t float_to_half(float f) {
  const uint32_t b = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const uint32_t exp = (b >> 23) & 0xff, mant = b & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
  const int e = static_cast<int>(exp) - 127;
  if (e > 15) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow: inf
  if (e >= -14) {  // normal: round the 13 dropped bits to nearest even (a carry may reach inf)
    uint32_t v = (static_cast<uint32_t>(e + 15) << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (v & 1u))) ++v;
    return static_cast<uint16_t>(sign | v);
  }
  if (e < -25) return sign;  // below half the smallest subnormal
  // Subnormal: value = m x 2^-24 with m = (1.mant) x 2^(e + 24), rounded to nearest even.
  const uint32_t full = mant | 0x800000u;
  const int shift = -e - 1;  // 14..24: bits dropped from the 24-bit significand to leave m
  uint32_t m = full >> shift;
  const uint32_t rest = full & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (m & 1u))) ++m;
  return static_cast<uint16_t>(sign | m);
}

uint16_t float_to_bf16(float f) {
  const uint32_t b = f32_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);  // NaN stays NaN
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

const char* kSupported = "F32, F16 or BF16";

// a x b, or fail when it passes 2^63.
uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& where) {
  if (a != 0 && b > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / a)
    fail(where, ": its size overflows");
  return a * b;
}

uint64_t offset_value(const json& v, const std::string& where) {
  if (!v.is_number_unsigned()) fail(where, ": data_offsets must be non-negative integers");
  return v.get<uint64_t>();
}

}  // namespace

const char* st_dtype_name(StDtype d) {
  switch (d) {
    case StDtype::f32: return "F32";
    case StDtype::f16: return "F16";
    case StDtype::bf16: return "BF16";
  }
  return "?";
}

int64_t st_dtype_size(StDtype d) { return d == StDtype::f32 ? 4 : 2; }

StDtype parse_st_dtype(const std::string& name, const std::string& where) {
  std::string up = name;
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (up == "F32" || up == "FLOAT32") return StDtype::f32;
  if (up == "F16" || up == "FLOAT16") return StDtype::f16;
  if (up == "BF16" || up == "BFLOAT16") return StDtype::bf16;
  fail(where, ": dtype ", name, " is not supported (", kSupported, ")");
}

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void st_decode(const uint8_t* bytes, int64_t n, StDtype dtype, float* out) {
  if (dtype == StDtype::f32) {
    if (n > 0) std::memcpy(out, bytes, static_cast<size_t>(n) * 4);  // an empty tensor may have no buffer
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
    out[i] = dtype == StDtype::f16 ? half_to_float(h) : bits_f32(static_cast<uint32_t>(h) << 16);
  }
}

std::vector<uint8_t> st_encode(const float* values, int64_t n, StDtype dtype) {
  std::vector<uint8_t> out(static_cast<size_t>(n * st_dtype_size(dtype)));
  if (dtype == StDtype::f32) {
    if (n) std::memcpy(out.data(), values, out.size());
    return out;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = dtype == StDtype::f16 ? float_to_half(values[i]) : float_to_bf16(values[i]);
    out[2 * i] = static_cast<uint8_t>(h & 0xff);
    out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const std::string file = "safetensors file " + path;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open ", file, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(file, " is not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail(file, " is ", size, " bytes, shorter than the 8-byte header length");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) fail("cannot map ", file, ": ", std::strerror(errno));
  map_ = map;
  map_size_ = size;
  try {
    const auto* bytes = static_cast<const uint8_t*>(map);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
    if (n > size - 8) fail(file, ": header length ", n, " runs past the end of the file (", size, " bytes)");
    const uint64_t data_size = size - 8 - n;
    data_ = bytes + 8 + n;
    json header;
    try {
      header = json::parse(bytes + 8, bytes + 8 + n);
    } catch (const json::exception& e) {
      fail(file, ": the header is not valid JSON (", e.what(), ")");
    }
    if (!header.is_object()) fail(file, ": the header is not a JSON object");
    for (const auto& [key, value] : header.items()) {
      if (key == "__metadata__") {
        if (!value.is_object()) fail(file, ": __metadata__ is not an object");
        for (const auto& [k, v] : value.items()) {
          if (!v.is_string()) fail(file, ": __metadata__ entry ", k, " is not a string");
          metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      const std::string where = file + ", tensor " + key;
      if (!value.is_object()) fail(where, ": its entry is not an object");
      for (const auto& [field, unused] : value.items())
        if (field != "dtype" && field != "shape" && field != "data_offsets") fail(where, ": unknown field ", field);
      if (!value.contains("dtype") || !value["dtype"].is_string()) fail(where, ": dtype missing or not a string");
      if (!value.contains("shape") || !value["shape"].is_array()) fail(where, ": shape missing or not an array");
      if (!value.contains("data_offsets") || !value["data_offsets"].is_array() || value["data_offsets"].size() != 2)
        fail(where, ": data_offsets missing or not [begin, end]");
      StTensor t;
      t.name = key;
      const std::string dtype = value["dtype"].get<std::string>();
      if (dtype != "F32" && dtype != "F16" && dtype != "BF16")
        fail(where, ": dtype ", dtype, " is not supported (", kSupported, ")");
      t.dtype = parse_st_dtype(dtype, where);
      uint64_t bytes_needed = static_cast<uint64_t>(st_dtype_size(t.dtype));
      for (const json& d : value["shape"]) {
        if (!d.is_number_unsigned()) fail(where, ": shape has a dimension that is not a non-negative integer");
        const uint64_t dim = d.get<uint64_t>();
        if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(where, ": shape dimension too large");
        bytes_needed = checked_mul(bytes_needed, dim, where);
        t.shape.push_back(static_cast<int64_t>(dim));
      }
      t.begin = offset_value(value["data_offsets"][0], where);
      t.end = offset_value(value["data_offsets"][1], where);
      if (t.begin > t.end) fail(where, ": data_offsets [", t.begin, ", ", t.end, ") end before they begin");
      if (t.end > data_size)
        fail(where, ": data_offsets [", t.begin, ", ", t.end, ") run past the data (", data_size, " bytes)");
      if (t.end - t.begin != bytes_needed)
        fail(where, ": shape and dtype ", dtype, " need ", bytes_needed, " bytes, data_offsets hold ", t.end - t.begin);
      tensors_.push_back(std::move(t));
    }
    // The byte ranges, in order, must tile the data exactly: no overlap, no gap, nothing after.
    std::vector<const StTensor*> by_offset;
    for (const StTensor& t : tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(), [](const StTensor* a, const StTensor* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t at = 0;
    for (const StTensor* t : by_offset) {
      if (t->begin < at) fail(file, ", tensor ", t->name, ": its bytes [", t->begin, ", ", t->end, ") overlap another tensor's");
      if (t->begin > at) fail(file, ", tensor ", t->name, ": a gap of ", t->begin - at, " bytes before its data");
      at = t->end;
    }
    if (at != data_size) fail(file, ": ", data_size - at, " bytes after the last tensor's data belong to no tensor");
    std::sort(tensors_.begin(), tensors_.end(), [](const StTensor& a, const StTensor& b) { return a.name < b.name; });
  } catch (...) {
    ::munmap(map_, map_size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

const StTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                                   [](const StTensor& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

std::vector<float> SafetensorsFile::read_f32(const StTensor& t) const {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  st_decode(data(t), t.numel(), t.dtype, out.data());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path, ec)) fail("cannot write safetensors file ", path, ": it exists (nothing is overwritten)");
  std::vector<const StWriteTensor*> order;
  for (const StWriteTensor& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const StWriteTensor* a, const StWriteTensor* b) { return a->name < b->name; });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const StWriteTensor* t : order) {
    uint64_t n = static_cast<uint64_t>(st_dtype_size(t->dtype));
    for (int64_t d : t->shape) n *= static_cast<uint64_t>(d);
    if (n != t->bytes.size())
      fail("writing ", path, ", tensor ", t->name, ": shape and dtype need ", n, " bytes, given ", t->bytes.size());
    if (t->name == "__metadata__" || header.contains(t->name)) fail("writing ", path, ": tensor name ", t->name, " twice or reserved");
    header[t->name] = {{"dtype", st_dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {at, at + n}}};
    at += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  if (!out) fail("cannot create safetensors file ", path);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const StWriteTensor* t : order) out.write(reinterpret_cast<const char*>(t->bytes.data()), static_cast<std::streamsize>(t->bytes.size()));
  out.close();
  if (!out) fail("writing safetensors file ", path, " failed (disk full?)");
}

}  // namespace tessera::io

// Hugging Face safetensors files: a checked, memory-mapped reader and a writer, F32, F16 and BF16.
// The format: an 8-byte little-endian header length N, N bytes of JSON ({"name": {"dtype", "shape",
// "data_offsets": [begin, end]}, ..., optional "__metadata__": {string: string}}), then the data,
// offsets relative to its start. The JSON is parsed with nlohmann-json; everything is checked
// before any byte is trusted.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera::io {

enum class StDtype { f32, f16, bf16 };
const char* st_dtype_name(StDtype d);  // "F32", "F16", "BF16"
int64_t st_dtype_size(StDtype d);
StDtype parse_st_dtype(const std::string& name, const std::string& where);  // "f32"/"F32"...; throws naming `where`

// Element conversions (f16/bf16 <-> f32): widening is exact; narrowing rounds to nearest even and
// keeps NaN a NaN, so narrowing what was widened gives the same bits back.
void st_decode(const uint8_t* bytes, int64_t n, StDtype dtype, float* out);
std::vector<uint8_t> st_encode(const float* values, int64_t n, StDtype dtype);

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps the file and checks its header: the length within the file, valid JSON of the format's
  // shape, each tensor's dtype (F32, F16, BF16; others refused by name), shape (non-negative
  // dimensions) and offsets (in order, inside the data, shape x dtype size bytes), the tensors
  // neither overlapping nor leaving gaps, and covering the data exactly. Errors name the file and
  // the tensor.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<StTensor>& tensors() const { return tensors_; }  // sorted by name
  const StTensor* find(const std::string& name) const;              // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const uint8_t* data(const StTensor& t) const { return data_ + t.begin; }  // raw little-endian bytes
  std::vector<float> read_f32(const StTensor& t) const;  // converted to f32

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;
  std::vector<StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: its raw bytes in `dtype` (st_encode), shape and name.
struct StWriteTensor {
  std::string name;
  StDtype dtype = StDtype::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Writes `path` (refusing an existing one): header padded with spaces to a multiple of 8 bytes,
// tensors in name order. Throws naming the tensor whose byte count disagrees with its shape.
void write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace tessera::io

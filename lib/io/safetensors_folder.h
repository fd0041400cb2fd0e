// A Hugging Face model folder's weights: model.safetensors, or the shards
// model-0000i-of-0000n.safetensors listed by model.safetensors.index.json. Reading checks the index
// against the shards; writing shards past a size and writes the index.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace tessera::io {

class SafetensorsFolder {
 public:
  // Opens dir/model.safetensors, else dir/model.safetensors.index.json and its shards. The index's
  // weight_map must name exactly the tensors the shards hold, each in the file it says.
  explicit SafetensorsFolder(const std::string& dir);
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  const StTensor& tensor(const std::string& name) const;  // throws naming it and the folder
  const SafetensorsFile& file_of(const std::string& name) const;
  std::vector<float> read_f32(const std::string& name) const;
  const std::string& dir() const { return dir_; }
  bool sharded() const { return files_.size() > 1 || sharded_; }

 private:
  std::string dir_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor -> index in files_
};

// Writes the tensors into dir (which must exist): model.safetensors when their bytes fit in
// max_shard_bytes (0: no limit), else model-0000i-of-0000n.safetensors, filled in the given order,
// plus model.safetensors.index.json. A tensor larger than the limit gets a shard of its own.
// Returns the files written.
std::vector<std::string> write_safetensors_folder(const std::string& dir, const std::vector<StWriteTensor>& tensors,
                                                  uint64_t max_shard_bytes,
                                                  const std::map<std::string, std::string>& metadata);

// "2GB", "500MB", "10KB", "123" (bytes); decimal units as Hugging Face's (GB = 10^9), and GiB,
// MiB, KiB as powers of two. Throws naming the text.
uint64_t parse_byte_size(const std::string& text);

}  // namespace tessera::io

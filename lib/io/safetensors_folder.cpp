// Hugging Face model folders: the single file or the index and its shards, read and written.
#include "io/safetensors_folder.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessera::io {
namespace fs = std::filesystem;
using json = nlohmann::json;

SafetensorsFolder::SafetensorsFolder(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("model folder ", dir, " is not a directory");
  const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single, ec)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const StTensor& t : files_[0]->tensors()) where_[t.name] = 0;
    return;
  }
  if (!fs::exists(index, ec))
    fail("model folder ", dir, " has neither model.safetensors nor model.safetensors.index.json");
  sharded_ = true;
  json j;
  try {
    std::ifstream in(index);
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail(index.string(), " is not valid JSON (", e.what(), ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(index.string(), ": no weight_map object");
  std::map<std::string, size_t> file_index;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) fail(index.string(), ": weight_map entry ", name, " is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      fail(index.string(), ": weight_map entry ", name, " names file '", f, "', not a file in the folder");
    if (!file_index.count(f)) {
      file_index[f] = files_.size();
      files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / f).string()));
    }
    where_[name] = file_index[f];
  }
  for (const auto& [name, i] : where_)
    if (!files_[i]->find(name)) fail(index.string(), " places tensor ", name, " in ", files_[i]->path(), ", which lacks it");
  for (const auto& f : files_)
    for (const StTensor& t : f->tensors()) {
      const auto it = where_.find(t.name);
      if (it == where_.end() || files_[it->second].get() != f.get())
        fail(f->path(), " holds tensor ", t.name, ", which ", index.string(),
             it == where_.end() ? " does not list" : " places in another file");
    }
}

std::vector<std::string> SafetensorsFolder::names() const {
  std::vector<std::string> out;
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

const SafetensorsFile& SafetensorsFolder::file_of(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) fail("model folder ", dir_, " has no tensor ", name);
  return *files_[it->second];
}

const StTensor& SafetensorsFolder::tensor(const std::string& name) const { return *file_of(name).find(name); }

std::vector<float> SafetensorsFolder::read_f32(const std::string& name) const {
  return file_of(name).read_f32(tensor(name));
}

std::vector<std::string> write_safetensors_folder(const std::string& dir, const std::vector<StWriteTensor>& tensors,
                                                  uint64_t max_shard_bytes,
                                                  const std::map<std::string, std::string>& metadata) {
  std::vector<std::vector<StWriteTensor>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const StWriteTensor& t : tensors) {
    const uint64_t n = t.bytes.size();
    if (max_shard_bytes > 0 && in_shard > 0 && in_shard + n > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += n;
    total += n;
  }
  std::vector<std::string> written;
  if (shards.size() == 1) {
    written.push_back((fs::path(dir) / "model.safetensors").string());
    write_safetensors(written.back(), shards[0], metadata);
    return written;
  }
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    written.push_back((fs::path(dir) / name).string());
    write_safetensors(written.back(), shards[i], metadata);
    for (const StWriteTensor& t : shards[i]) weight_map[t.name] = name;
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string path = (fs::path(dir) / "model.safetensors.index.json").string();
  std::ofstream out(path);
  out << index.dump(2) << "\n";
  out.close();
  if (!out) fail("cannot write ", path);
  written.push_back(path);
  return written;
}

uint64_t parse_byte_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    fail("size '", text, "' is not a number with an optional unit (e.g. 2GB, 500MB)");
  }
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::map<std::string, double> units = {{"", 1},         {"B", 1},       {"KB", 1e3},   {"MB", 1e6},
                                               {"GB", 1e9},     {"TB", 1e12},   {"KIB", 1024.0}, {"MIB", 1048576.0},
                                               {"GIB", 1073741824.0}};
  const auto it = units.find(unit);
  if (it == units.end() || !(value > 0)) fail("size '", text, "' is not a positive number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB)");
  return static_cast<uint64_t>(value * it->second);
}

}  // namespace tessera::io

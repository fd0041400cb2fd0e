// CompletionWriter: ordered JSON lines (invalid UTF-8 in a completion replaced, never fatal).
#include "infer/completion_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessera::infer {

CompletionWriter::CompletionWriter(const std::string& path, bool logprobs) : path_(path), logprobs_(logprobs) {
  if (path == "-") {
    file_ = stdout;
    return;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  TESSERA_CHECK(!fs::exists(status) || !fs::is_directory(status), "--output ", path, " is a directory");
  TESSERA_CHECK(!fs::is_regular_file(status), "--output ", path,
                " already exists: nothing is overwritten (move it away or give another file)");
  file_ = std::fopen(path.c_str(), fs::exists(status) ? "a" : "wx");
  TESSERA_CHECK(file_, "cannot create --output ", path, ": ", std::strerror(errno));
  owned_ = true;
}

CompletionWriter::~CompletionWriter() {
  if (owned_ && file_) std::fclose(file_);
}

std::string CompletionWriter::line(const Completion& c, const std::string& prompt_text, bool logprobs) {
  nlohmann::ordered_json j;
  j["index"] = c.index;
  j["prompt"] = prompt_text;
  j["completion"] = c.text;
  j["completion_ids"] = c.ids;
  j["finish_reason"] = c.finish_reason;
  if (logprobs) j["logprobs"] = c.logprobs;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void CompletionWriter::add(const Completion& c, const std::string& prompt_text) {
  add_line(c.index, line(c, prompt_text, logprobs_));
}

void CompletionWriter::add_line(uint64_t index, std::string line) {
  TESSERA_CHECK(index >= next_ && pending_.count(index) == 0, "--output ", path_, ": completion ", index,
                " came twice");
  pending_[index] = std::move(line);
  write_ready();
}

void CompletionWriter::write_ready() {
  for (auto it = pending_.find(next_); it != pending_.end(); it = pending_.find(next_)) {
    const std::string line = it->second + "\n";
    TESSERA_CHECK(std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
                  "cannot write --output ", path_, ": ", std::strerror(errno));
    pending_.erase(it);
    ++next_;
  }
}

void CompletionWriter::close() {
  TESSERA_CHECK(pending_.empty(), "--output ", path_, ": completion ", next_, " never came");
  if (owned_ && file_) {
    const int rc = std::fclose(file_);
    file_ = nullptr;
    TESSERA_CHECK(rc == 0, "cannot close --output ", path_, ": ", std::strerror(errno));
  }
}

}  // namespace tessera::infer

// read_prompt_file: nlohmann-json per line, each line checked before use.
#include "infer/prompt_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessera::infer {

std::vector<PromptLine> read_prompt_file(const std::string& path) {
  std::error_code ec;
  TESSERA_CHECK(std::filesystem::exists(path, ec), "prompts file ", path, " does not exist");
  TESSERA_CHECK(!std::filesystem::is_directory(path, ec), "prompts file ", path, " is a directory");
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in, "cannot read prompts file ", path, ": ", std::strerror(errno));
  std::vector<PromptLine> prompts;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + " line " + std::to_string(number);
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    TESSERA_CHECK(!j.is_discarded(), where, " is not JSON: expected an object such as {\"text\": \"Once upon\"}");
    TESSERA_CHECK(j.is_object(), where, " is JSON but not an object: expected {\"text\": ...} or {\"ids\": [...]}");
    const bool has_text = j.contains("text"), has_ids = j.contains("ids");
    TESSERA_CHECK(has_text != has_ids, where, has_text ? " has both \"text\" and \"ids\": give one"
                                                      : " has neither \"text\" nor \"ids\"");
    PromptLine p;
    p.line = number;
    p.has_ids = has_ids;
    if (has_text) {
      TESSERA_CHECK(j["text"].is_string(), where, ": \"text\" must be a string, got ", j["text"].dump());
      p.text = j["text"].get<std::string>();
    } else {
      const nlohmann::json& ids = j["ids"];
      TESSERA_CHECK(ids.is_array(), where, ": \"ids\" must be an array of token ids, got ", ids.dump());
      for (const nlohmann::json& id : ids) {
        TESSERA_CHECK(id.is_number_integer(), where, ": \"ids\" holds ", id.dump(), ", not an integer token id");
        const int64_t v = id.get<int64_t>();
        TESSERA_CHECK(v >= 0 && v <= std::numeric_limits<int32_t>::max(), where, ": token id ", v,
                      " is out of range");
        p.ids.push_back(static_cast<int32_t>(v));
      }
    }
    prompts.push_back(std::move(p));
  }
  TESSERA_CHECK(!in.bad(), "error reading prompts file ", path);
  TESSERA_CHECK(!prompts.empty(), "prompts file ", path, " holds no prompts");
  return prompts;
}

}  // namespace tessera::infer

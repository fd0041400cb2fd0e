// data_prep's shared pieces: the command-line mistake (exit 2), the output written aside and renamed
// into place (AtomicOutput), option parsing, the options of the commands that write text's tokens
// (TextTokenOptions), and whole-file reads. Each command is in its own file (commands.h lists them).
#pragma once
#include <boost/program_options.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/tokenizer.h"

namespace data_prep {

namespace po = boost::program_options;
namespace fs = std::filesystem;
using tessera::fail;

extern const char* const kExample;  // every command's examples (data_prep.cpp)

// A mistake on the command line: reported as "error: ..." with exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The output file is written under a temporary name of its own next to it (<output>.tmp.XXXXXX,
// created exclusively, so no other file is touched) and renamed into place only when complete; on
// any failure the temporary is removed, so no partial output is ever left behind and an output that
// --overwrite replaces stays as it was. The output is never one of the command's inputs (the same file,
// whatever the path), and an existing output is replaced only with --overwrite.
class AtomicOutput {
 public:
  AtomicOutput(const std::string& output, bool overwrite, const std::vector<std::string>& inputs) : output_(output) {
    const fs::path parent = fs::path(output).parent_path();
    std::error_code ec;
    if (!parent.empty() && !fs::is_directory(parent, ec))
      fail("cannot write ", output, ": directory ", parent.string(), " does not exist");
    if (fs::is_directory(output, ec)) fail("cannot write ", output, ": it is a directory");
    const bool exists = fs::exists(output, ec);
    for (const std::string& input : inputs)
      if (exists && fs::exists(input, ec) && fs::equivalent(input, output, ec))
        fail("cannot write ", output, ": it is the input ", input, " (data_prep never writes over its input,",
             " even with --overwrite; give another --output)");
    if (exists && !overwrite)
      fail("cannot write ", output, ": it exists (give --overwrite to replace it; the new file is written aside",
           " and renamed over the old one only when complete)");
    // Create the temporary now, so an unwritable folder is reported before any work is done.
    std::string name = output + ".tmp.XXXXXX";
    const int fd = mkstemp(name.data());
    if (fd < 0) fail("cannot write ", output, ": ", std::strerror(errno), " (creating ", name, ")");
    const mode_t mask = umask(0);  // mkstemp makes it 0600: give it the mode a new file would have
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    close(fd);
    tmp_ = name;
  }
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;
  ~AtomicOutput() {
    if (!committed_) {
      std::error_code ec;
      fs::remove(tmp_, ec);
    }
  }
  const std::string& tmp() const { return tmp_; }
  void commit() {
    std::error_code ec;
    fs::rename(tmp_, output_, ec);  // atomic: readers see the old file or the new one
    if (ec) fail("cannot rename ", tmp_, " to ", output_, ": ", ec.message());
    committed_ = true;
  }

 private:
  std::string output_, tmp_;
  bool committed_ = false;
};

// Every command's --overwrite (once --force: tools name it as the trainers do).
inline constexpr const char* kOverwriteHelp =
    "replace an existing --output (written aside first and renamed over it only when complete; never an input)";

// Parses a subcommand's options; returns false when --help was printed (its usage, the options
// and the commands' examples). Renamed options still work, with a warning (cli::RenamedOption).
bool parse(const std::vector<std::string>& args, const po::options_description& desc, const char* usage,
           po::variables_map& vm);

// How written tokens are stored (--chunk-tokens, --deflate): the commands that write token data
// sets (text, sft, merge, import-megatron) take both.
struct TokenStorage {
  int64_t chunk = int64_t{1} << 20;  // tokens per HDF5 chunk
  int deflate = 0;                   // 0-9
  void add_to(po::options_description& desc);
  void check() const;  // UsageError naming the option out of range
};

// A whole file's bytes; `what` names it in errors ("input", "--tokenizer").
std::string read_whole_file(const std::string& path, const char* what);

// The tokenizer a text-writing command (text, sft) takes: --tokenizer PATH's (its kind and file
// bytes, stored in the output), else bytes; and its end-of-document token: --eos-id when given
// (checked against the vocabulary), else a tokenizer.json's <|endoftext|> when that is one token,
// else none (-1).
struct ChosenTokenizer {
  std::string kind = "bytes", bytes;
  std::unique_ptr<tessera::text::Tokenizer> tokenizer;
  int64_t eos_id = -1;
  int64_t vocab() const { return tokenizer->vocab_size(); }
};
ChosenTokenizer choose_tokenizer(const std::string& path, const po::variables_map& vm, int64_t eos_id_given);

// The options of the commands that write the tokens of text (text, sft), declared once in the order
// their --help lists them: --help, the command's --input, --output, --tokenizer, the command's own
// options, --eos-id, --val-fraction, --overwrite and TokenStorage's; the help of --eos-id and
// --val-fraction is the command's.
struct TextTokenOptions {
  std::string output, tokenizer_path;
  int64_t eos_id = -1;
  double val_fraction = 0.1;
  bool overwrite = false;
  TokenStorage storage;
  using Declare = std::function<void(po::options_description&)>;
  void declare(po::options_description& desc, const Declare& input, const Declare& own, const char* eos_id_help,
               const char* val_fraction_help);
  void check() const;  // UsageError naming --val-fraction or a storage option out of range
  // The tokenizer (choose_tokenizer), eos_id set to its end-of-document token; the tokenizer's file
  // joins `inputs`, the files the output must not be.
  ChosenTokenizer choose(const po::variables_map& vm, std::vector<std::string>& inputs);
};

}  // namespace data_prep

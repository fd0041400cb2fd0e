// data_prep's option parsing and whole-file reads.
#include "apps/data_prep/data_prep_common.h"

#include <fstream>
#include <iostream>
#include <iterator>

#include "apps/common/cli.h"

namespace data_prep {

// Renamed options: the old name still works, with a warning (cli::RenamedOption).
const std::vector<tessera::cli::RenamedOption> kRenamed = {{"force", "overwrite"}};

bool parse(const std::vector<std::string>& args, const po::options_description& desc,
           const char* usage, po::variables_map& vm) {
  po::options_description parsing;
  parsing.add(desc);
  po::options_description hidden;
  std::vector<tessera::cli::RenamedOption> renamed;  // those whose new name this command has
  for (const tessera::cli::RenamedOption& r : kRenamed)
    if (desc.find_nothrow(r.name, false) != nullptr) renamed.push_back(r);
  tessera::cli::add_renamed(hidden, desc, renamed);
  parsing.add(hidden);
  po::parsed_options parsed = po::command_line_parser(args).options(parsing).run();
  tessera::cli::apply_renames(parsed, renamed, tessera::cli::kOnCommandLine);
  tessera::cli::check_parsed(parsed, tessera::cli::kOnCommandLine);  // repeats, nan, negative seeds
  po::store(parsed, vm);
  if (vm.count("help")) {
    std::cout << usage << "\n" << desc << "\nExample:\n" << kExample << "\n";
    return false;
  }
  po::notify(vm);
  return true;
}

void TokenStorage::add_to(po::options_description& desc) {
  desc.add_options()
      ("chunk-tokens", po::value(&chunk)->default_value(int64_t{1} << 20)->value_name("N"), "tokens per HDF5 chunk")
      ("deflate", po::value(&deflate)->default_value(0)->value_name("0-9"), "compression level of the chunks (0: none)");
}

void TokenStorage::check() const {
  if (chunk < 1) throw UsageError(std::string("--chunk-tokens must be at least 1, got ") + std::to_string(chunk));
  if (deflate < 0 || deflate > 9) throw UsageError(std::string("--deflate must be 0 to 9, got ") + std::to_string(deflate));
}

void TextTokenOptions::declare(po::options_description& desc, const Declare& input, const Declare& own,
                               const char* eos_id_help, const char* val_fraction_help) {
  desc.add_options()("help,h", "show this help");
  input(desc);
  desc.add_options()
      ("output", po::value(&output)->required()->value_name("FILE.h5"), "HDF5 file to write")
      ("tokenizer", po::value(&tokenizer_path)->value_name("PATH"),
       "a SentencePiece *.model or a Hugging Face tokenizer.json (byte-level BPE); default: bytes");
  own(desc);
  desc.add_options()
      ("eos-id", po::value(&eos_id)->value_name("ID"), eos_id_help)
      ("val-fraction", po::value(&val_fraction)->default_value(0.1, "0.1")->value_name("F"), val_fraction_help)
      ("overwrite", po::bool_switch(&overwrite), kOverwriteHelp);
  storage.add_to(desc);
}

void TextTokenOptions::check() const {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    throw UsageError("--val-fraction must be in [0, 1), got " + std::to_string(val_fraction));
  storage.check();
}

ChosenTokenizer TextTokenOptions::choose(const po::variables_map& vm, std::vector<std::string>& inputs) {
  if (!tokenizer_path.empty()) inputs.push_back(tokenizer_path);
  ChosenTokenizer chosen = choose_tokenizer(tokenizer_path, vm, eos_id);
  eos_id = chosen.eos_id;
  return chosen;
}

std::string read_whole_file(const std::string& path, const char* what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("cannot read ", what, " ", path, ": no such file");
  if (fs::is_directory(path, ec)) fail("cannot read ", what, " ", path, ": it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read ", what, " ", path, ": permission denied or unreadable");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail("cannot read ", what, " ", path, ": read error");
  return bytes;
}

ChosenTokenizer choose_tokenizer(const std::string& path, const po::variables_map& vm, int64_t eos_id_given) {
  ChosenTokenizer c;
  if (!path.empty()) {
    c.kind = tessera::text::tokenizer_kind_of_path(path);
    c.bytes = read_whole_file(path, "--tokenizer");
  }
  c.tokenizer = tessera::text::make_tokenizer(c.kind, c.bytes, path);
  if (vm.count("eos-id")) {
    if (eos_id_given < 0 || eos_id_given >= c.vocab())
      throw UsageError("--eos-id " + std::to_string(eos_id_given) + " is outside the vocabulary [0, " +
                       std::to_string(c.vocab()) + ")");
    c.eos_id = eos_id_given;
  } else if (c.kind == "hf-byte-level-bpe") {
    const std::vector<int32_t> e = c.tokenizer->encode("<|endoftext|>");
    if (e.size() == 1) c.eos_id = e[0];
  }
  return c;
}

}  // namespace data_prep

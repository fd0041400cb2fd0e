// data_prep: makes the trainers' HDF5 data sets: token sets `text` (a file's tokens: bytes, or a
// SentencePiece / Hugging Face tokenizer's, stored with them; `decode` turns them back into text) and
// `synth` (a random sparse Markov chain whose entropy rate, the loss floor, is stored with it); image
// sets `cifar10` (the official binary files) and `synth-images` (learnable class patterns); `merge` joins
// token shards and `import-megatron` converts Megatron-LM indexed data sets (.bin/.idx).
#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/cli.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "io/cifar10.h"
#include "io/hdf5_file.h"
#include "io/image_dataset.h"
#include "io/markov_source.h"
#include "io/megatron_dataset.h"
#include "io/synth_images.h"
#include "io/token_dataset.h"
#include "io/token_reader.h"
#include "io/token_writer.h"
#include "text/stored_tokenizer.h"
#include "text/tokenizer.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using tessera::DType;
using tessera::Tensor;
using tessera::fail;
using tessera::io::H5File;

namespace {

constexpr const char* kUsage =
    "usage: data_prep <command> [options]\n"
    "\n"
    "Makes token data sets (HDF5: /train/tokens, /val/tokens, attributes vocab_size, tokenizer)\n"
    "and image data sets (HDF5: /train/images uint8 [N, H, W, C], /train/labels, the same under\n"
    "/test, attributes num_classes, class_names).\n"
    "\n"
    "commands:\n"
    "  text          tokens of text files, a folder or JSONL: bytes (vocab 256), or a tokenizer's (--tokenizer)\n"
    "  merge         joins token data sets (shards) into one\n"
    "  import-megatron  converts a Megatron-LM indexed data set (PREFIX.bin + PREFIX.idx)\n"
    "  verify        scans a whole token data set: every token in the vocabulary, /doc_offsets in order\n"
    "  decode        a token data set's ids back to text, with the tokenizer stored in it\n"
    "  synth         tokens sampled from a random sparse Markov chain, with its exact entropy rate\n"
    "  cifar10       the CIFAR-10 binary version (data_batch_1..5.bin, test_batch.bin, batches.meta.txt)\n"
    "  synth-images  a small learnable image set: a coloured pattern per class plus noise\n"
    "\n"
    "Run `data_prep <command> --help` for the options of a command, `data_prep --version` for the build.\n";

constexpr const char* kCommands = "text, merge, import-megatron, verify, decode, synth, cifar10 or synth-images";

constexpr const char* kExample =
    "  data_prep synth --vocab 64 --tokens 200000 --seed 1 --output data.h5\n"
    "  data_prep text --input book.txt --output book.h5 --val-fraction 0.1\n"
    "  data_prep text --input book.txt --tokenizer tokenizer.json --output book.h5\n"
    "  data_prep text --input corpus.jsonl --text-key text --output corpus.h5\n"
    "  data_prep merge --input 'shards/shard_*.h5' --output all.h5\n"
    "  data_prep import-megatron --input corpus_text_document --vocab-size 50257 --output corpus.h5\n"
    "  data_prep verify all.h5\n"
    "  data_prep decode --input book.h5 --split val --start 0 --count 100\n"
    "  data_prep synth-images --classes 10 --train 2000 --test 400 --size 32 --seed 1 --output synth.h5";

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
constexpr const char* kOverwriteHelp =
    "replace an existing --output (written aside first and renamed over it only when complete; never an input)";

// Parses a subcommand's options; returns false when --help was printed.
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

// A whole file's bytes; `what` names it in errors ("input", "--tokenizer").
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

// The documents of `data_prep text`'s inputs, one at a time: each plain file is one document; a
// folder contributes its regular files (recursively, in name order); a *.jsonl (or *.ndjson) file
// one document per line, its text under --text-key (default "text").
class DocumentSource {
 public:
  DocumentSource(const std::vector<std::string>& inputs, std::string text_key) : key_(std::move(text_key)) {
    for (const std::string& in : inputs) {
      std::error_code ec;
      if (fs::is_directory(in, ec)) {
        std::vector<std::string> found;
        for (const auto& e : fs::recursive_directory_iterator(in, ec))
          if (e.is_regular_file()) found.push_back(e.path().string());
        if (found.empty()) fail("input directory ", in, " holds no file");
        std::sort(found.begin(), found.end());
        files_.insert(files_.end(), found.begin(), found.end());
      } else {
        if (!fs::exists(in, ec)) fail("cannot read input ", in, ": no such file");
        files_.push_back(in);
      }
    }
  }
  const std::vector<std::string>& files() const { return files_; }
  static bool jsonl(const std::string& f) {
    const std::string ext = fs::path(f).extension().string();
    return ext == ".jsonl" || ext == ".ndjson";
  }

  // The next document's text and where it came from; false at the end.
  bool next(std::string& text, std::string& where) {
    for (;;) {
      if (lines_) {
        std::string line;
        while (std::getline(*lines_, line)) {
          ++line_no_;
          if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
          where = files_[index_ - 1] + ":" + std::to_string(line_no_);
          nlohmann::json j;
          try {
            j = nlohmann::json::parse(line);
          } catch (const std::exception& e) {
            fail("input ", where, ": not a JSON object (", e.what(), ")");
          }
          const std::string& key = key_;
          if (!j.is_object() || !j.contains(key) || !j[key].is_string())
            fail("input ", where, ": no string under the key '", key, "' (give --text-key)");
          text = j[key].get<std::string>();
          return true;
        }
        lines_.reset();
      }
      if (index_ >= files_.size()) return false;
      const std::string& f = files_[index_++];
      if (jsonl(f)) {
        lines_ = std::make_unique<std::ifstream>(f, std::ios::binary);
        if (!*lines_) fail("cannot read input ", f, ": permission denied or unreadable");
        line_no_ = 0;
        continue;
      }
      text = read_whole_file(f, "input");
      where = f;
      return true;
    }
  }

 private:
  std::vector<std::string> files_;
  std::string key_;
  size_t index_ = 0;
  std::unique_ptr<std::ifstream> lines_;
  int64_t line_no_ = 0;
};

int run_text(const std::vector<std::string>& args) {
  std::vector<std::string> inputs_given;
  std::string output, tokenizer_path, text_key;
  double val_fraction = 0.1;
  int64_t eos_id = -1, chunk = int64_t{1} << 20;
  int deflate = 0;
  bool overwrite = false;
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("input", po::value(&inputs_given)->required()->multitoken()->value_name("FILE|DIR ..."),
       "text files, folders of them, or JSONL files: each file (or JSONL line) is one document")
      ("output", po::value(&output)->required()->value_name("FILE.h5"), "HDF5 file to write")
      ("tokenizer", po::value(&tokenizer_path)->value_name("PATH"),
       "a SentencePiece *.model or a Hugging Face tokenizer.json (byte-level BPE); default: bytes")
      ("text-key", po::value(&text_key)->default_value("text")->value_name("KEY"), "*.jsonl and *.ndjson inputs: one document a line, its text under KEY")
      ("eos-id", po::value(&eos_id)->value_name("ID"), "token put between documents (default: see below)")
      ("val-fraction", po::value(&val_fraction)->default_value(0.1, "0.1")->value_name("F"),
       "one document: the last F of its tokens go to /val; several: each document goes to /val with probability F")
      ("chunk-tokens", po::value(&chunk)->default_value(int64_t{1} << 20)->value_name("N"), "tokens per HDF5 chunk")
      ("deflate", po::value(&deflate)->default_value(0)->value_name("0-9"), "compression level of the chunks (0: none)")
      ("overwrite", po::bool_switch(&overwrite), kOverwriteHelp);
  po::variables_map vm;
  if (!parse(args, desc,
             "usage: data_prep text --input FILE|DIR ... --output FILE.h5 [--tokenizer PATH] [--text-key KEY]\n"
             "                      [--eos-id ID] [--val-fraction F] [--chunk-tokens N] [--deflate L] [--overwrite]\n\n"
             "Tokens of the inputs, one document per file (or per JSONL line), written as they are made\n"
             "(the corpus is never held): /train/tokens and /val/tokens (uint16 when the vocabulary\n"
             "fits, else uint32, chunked) and /train/doc_offsets, /val/doc_offsets (int64: the first\n"
             "token of each document). Between documents comes an end-of-document token: --eos-id,\n"
             "else a tokenizer.json's <|endoftext|> when it has one, else none (bytes have no spare id\n"
             "and SentencePiece already ends every line with its EOS): /doc_offsets always holds the\n"
             "boundaries. Without --tokenizer each byte is a token (vocab 256). With one, vocab_size is\n"
             "the tokenizer's and its file is stored in the data set (/tokenizer_file, attributes\n"
             "tokenizer, tokenizer_file, tokenizer_checksum), so that `data_prep decode` and later tools\n"
             "read the ids without it. SentencePiece encodes line by line (as spm_encode does), the\n"
             "model's EOS id after each line; a tokenizer.json's text must be UTF-8.\n",
             vm))
    return 0;
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    throw UsageError("--val-fraction must be in [0, 1), got " + std::to_string(val_fraction));
  if (chunk < 1) throw UsageError("--chunk-tokens must be at least 1, got " + std::to_string(chunk));
  if (deflate < 0 || deflate > 9) throw UsageError("--deflate must be 0 to 9, got " + std::to_string(deflate));

  std::string kind = "bytes", tokenizer_bytes;
  std::vector<std::string> inputs = inputs_given;
  if (!tokenizer_path.empty()) {
    kind = tessera::text::tokenizer_kind_of_path(tokenizer_path);
    tokenizer_bytes = read_whole_file(tokenizer_path, "--tokenizer");
    inputs.push_back(tokenizer_path);
  }
  const std::unique_ptr<tessera::text::Tokenizer> tokenizer =
      tessera::text::make_tokenizer(kind, tokenizer_bytes, tokenizer_path);
  const int64_t vocab = tokenizer->vocab_size();
  if (!vm.count("eos-id") && kind == "hf-byte-level-bpe") {
    const std::vector<int32_t> e = tokenizer->encode("<|endoftext|>");
    if (e.size() == 1) eos_id = e[0];
  }
  if (vm.count("eos-id") && (eos_id < 0 || eos_id >= vocab))
    throw UsageError("--eos-id " + std::to_string(eos_id) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  DocumentSource docs(inputs_given, text_key);
  const bool one_document = docs.files().size() == 1 && !docs.jsonl(docs.files()[0]);

  AtomicOutput out(output, overwrite, inputs);
  int64_t n_train = 0, n_val = 0, d_train = 0, d_val = 0;
  {
    H5File f = H5File::create(out.tmp());
    tessera::io::TokenWriter train(f, "/train", vocab, chunk, deflate);
    std::optional<tessera::io::TokenWriter> val;
    if (val_fraction > 0) val.emplace(f, "/val", vocab, chunk, deflate);
    std::string text, where;
    int64_t index = 0;
    while (docs.next(text, where)) {
      if (one_document && text.empty()) fail("input ", where, " is empty: no tokens to write");
      std::vector<int32_t> tokens;
      try {
        tokens = tokenizer->encode(text);
      } catch (const tessera::Error& e) {
        fail("cannot tokenise input ", where, ": ", e.what());
      }
      if (one_document) {
        // One document: the last F of its tokens are the validation split (as always).
        const auto n = static_cast<int64_t>(tokens.size());
        const auto nv = static_cast<int64_t>(std::floor(static_cast<double>(n) * val_fraction));
        if (n < 2 || (val_fraction > 0 && (nv < 2 || n - nv < 2)))
          fail("input ", where, " has only ", n, " tokens: too few to split into train and val with --val-fraction ",
               val_fraction, " (each split needs at least 2 tokens)");
        train.start_document();
        train.append(tokens.data(), n - nv);
        if (val) {
          val->start_document();
          val->append(tokens.data() + (n - nv), nv);
        }
      } else {
        // Several: document i goes to /val when Philox (0, "data_prep.val", i) falls below F.
        const tessera::PhiloxCounter w = tessera::philox_bits(0, tessera::stream_id("data_prep.val"), index++);
        const bool to_val = val && static_cast<double>(w[0]) / 4294967296.0 < val_fraction;
        tessera::io::TokenWriter& into = to_val ? *val : train;
        // The end-of-document token closes the split's previous document: it goes between documents.
        if (eos_id >= 0 && into.size() > 0) {
          const auto eos = static_cast<int32_t>(eos_id);
          into.append(&eos, 1);
        }
        into.start_document();
        into.append(tokens);
      }
    }
    n_train = train.finish();
    d_train = train.documents();
    if (val) {
      n_val = val->finish();
      d_val = val->documents();
    }
    if (n_train < 2) fail("the inputs give ", n_train, " training tokens: too few (at least 2)");
    if (val && n_val == 0) fail("no document went to /val: use more documents, or --val-fraction 0");
    f.set_attr("/", "vocab_size", vocab);
    if (eos_id >= 0) f.set_attr("/", "eos_id", eos_id);
    tessera::text::store_tokenizer(f, kind, tokenizer_bytes, fs::path(tokenizer_path).filename().string());
    f.set_attr("/", "source", fs::path(inputs_given[0]).filename().string());
    f.flush();
  }
  out.commit();
  std::cout << "wrote " << output << ": " << n_train << " train and " << n_val << " val tokens";
  if (!one_document) std::cout << " in " << d_train << " and " << d_val << " documents";
  std::cout << " (" << (tokenizer_path.empty() ? kind : kind + " " + tokenizer_path) << ", vocab " << vocab << ")\n";
  return 0;
}

int run_decode(const std::vector<std::string>& args) {
  std::string input, split = "train";
  int64_t start = 0, count = -1;
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("input", po::value(&input)->required()->value_name("FILE.h5"), "token data set made by data_prep text")
      ("split", po::value(&split)->default_value("train")->value_name("train|val"), "which split to decode")
      ("start", po::value(&start)->default_value(0)->value_name("N"), "first token to decode")
      ("count", po::value(&count)->value_name("M"), "tokens to decode (default: to the end of the split)");
  po::variables_map vm;
  if (!parse(args, desc,
             "usage: data_prep decode --input FILE.h5 [--split train|val] [--start N] [--count M]\n\n"
             "Writes tokens [N, N + M) of the split as text on standard output, decoded with the\n"
             "tokenizer the data set carries (bytes, SentencePiece or a tokenizer.json's BPE).\n",
             vm))
    return 0;
  if (split != "train" && split != "val") throw UsageError("--split must be train or val, got '" + split + "'");
  if (start < 0) throw UsageError("--start must not be negative, got " + std::to_string(start));
  if (vm.count("count") && count < 0) throw UsageError("--count must not be negative, got " + std::to_string(count));
  const tessera::io::TokenDataset data = tessera::io::TokenDataset::open(input, split);
  const std::unique_ptr<tessera::text::Tokenizer> tokenizer =
      tessera::text::load_stored_tokenizer(H5File::open_read(input));
  if (tokenizer->vocab_size() != data.vocab_size)
    fail(input, ": vocab_size ", data.vocab_size, " differs from its stored tokenizer's ", tokenizer->vocab_size());
  if (start > data.size())
    throw UsageError("--start " + std::to_string(start) + " is past the end of " + data.dataset + " (" +
                     std::to_string(data.size()) + " tokens)");
  if (!vm.count("count")) count = data.size() - start;
  if (count > data.size() - start)
    throw UsageError("--start " + std::to_string(start) + " --count " + std::to_string(count) + " passes the end of " +
                     data.dataset + " (" + std::to_string(data.size()) + " tokens)");
  const std::vector<int32_t> ids = data.read(start, count);
  const std::string text = tokenizer->decode(ids);
  std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::cout.flush();
  if (!std::cout) fail("cannot write the decoded text to standard output");
  return 0;
}

// Scans one split of one file: every token in the vocabulary, /doc_offsets 1-D int64, starting at
// 0, increasing, inside the tokens. Returns the problems found (at most a few of each kind).
std::vector<std::string> verify_split(const std::string& path, const std::string& split, int64_t& tokens,
                                      int64_t& documents) {
  std::vector<std::string> problems;
  tessera::io::TokenDataset data;
  try {
    data = tessera::io::TokenDataset::open(path, split);
  } catch (const tessera::Error& e) {
    problems.push_back(e.what());
    return problems;
  }
  tokens = data.size();
  constexpr int64_t kBlock = int64_t{1} << 22;
  std::vector<int32_t> block(static_cast<size_t>(std::min(kBlock, tokens)));
  for (int64_t first = 0; first < tokens; first += kBlock) {
    const int64_t n = std::min(kBlock, tokens - first);
    try {
      data.read(first, n, block.data());
    } catch (const tessera::Error& e) {
      // The reader names the first bad token of the block; scan on after it.
      problems.push_back(e.what());
      if (problems.size() >= 5) {
        problems.push_back("(stopped after 5 problems)");
        return problems;
      }
    }
  }
  const H5File f = H5File::open_read(path);
  const std::string offsets = data.dataset.substr(0, data.dataset.size() - 6) + "doc_offsets";
  documents = 0;
  if (f.has(offsets)) {
    const int64_t n = f.shape(offsets)[0];
    documents = n;
    int64_t previous = -1;
    int reported = 0;
    for (int64_t first = 0; first < n && reported < 5; first += kBlock) {
      const std::vector<int64_t> o = f.read_i64(offsets, first, std::min(kBlock, n - first));
      for (size_t i = 0; i < o.size() && reported < 5; ++i) {
        const int64_t at = first + static_cast<int64_t>(i);
        std::string why;
        if (at == 0 && o[i] != 0) why = "the first document must start at token 0";
        else if (o[i] <= previous) why = "not after the previous offset " + std::to_string(previous) + " (offsets must increase)";
        else if (o[i] >= tokens) why = "past the last token (" + std::to_string(tokens) + " tokens)";
        if (!why.empty()) {
          problems.push_back(path + ": " + offsets + "[" + std::to_string(at) + "] = " + std::to_string(o[i]) + ": " + why);
          ++reported;
        }
        previous = o[i];
      }
    }
  }
  return problems;
}

int run_verify(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  po::options_description desc("Options");
  desc.add_options()("help,h", "show this help")
      ("input", po::value(&files)->multitoken()->value_name("FILE.h5 ..."), "token data sets to scan");
  po::positional_options_description positional;
  positional.add("input", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: data_prep verify FILE.h5 ...\n\nReads every token of every split (/train, /val or /tokens)"
                 " and checks it against vocab_size, and every /doc_offsets entry (int64, from 0, increasing,\n"
                 "inside the tokens). Prints a report; exit code 1 when anything is wrong.\n\n" << desc;
    return 0;
  }
  po::notify(vm);
  if (files.empty()) throw UsageError("verify: give the token data set(s) to scan");
  bool ok = true;
  for (const std::string& pattern : files)
    for (const std::string& path : tessera::io::TokenDataset::expand(pattern)) {
      const H5File f = H5File::open_read(path);
      std::vector<std::string> splits;
      for (const char* s : {"train", "val"})
        if (f.has(std::string("/") + s + "/tokens")) splits.push_back(s);
      if (splits.empty()) splits.push_back("train");  // /tokens, or the error naming what is missing
      for (const std::string& split : splits) {
        int64_t tokens = 0, documents = 0;
        const std::vector<std::string> problems = verify_split(path, split, tokens, documents);
        std::cout << path << " " << split << ": " << tokens << " tokens, " << documents << " documents: "
                  << (problems.empty() ? "ok" : "FAILED") << "\n";
        for (const std::string& p : problems) std::cout << "  " << p << "\n";
        ok = ok && problems.empty();
      }
    }
  if (!ok) {
    std::cerr << "error: verify found problems (listed above)\n";
    return 1;
  }
  return 0;
}

int run_merge(const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  std::string output;
  int64_t chunk = int64_t{1} << 20;
  int deflate = 0;
  bool overwrite = false;
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("input", po::value(&inputs)->required()->multitoken()->value_name("FILE.h5|GLOB ..."),
       "token data sets (shards), joined in the order given (a glob's files in name order)")
      ("output", po::value(&output)->required()->value_name("FILE.h5"), "HDF5 file to write")
      ("chunk-tokens", po::value(&chunk)->default_value(int64_t{1} << 20)->value_name("N"), "tokens per HDF5 chunk")
      ("deflate", po::value(&deflate)->default_value(0)->value_name("0-9"), "compression level of the chunks (0: none)")
      ("overwrite", po::bool_switch(&overwrite), kOverwriteHelp);
  po::variables_map vm;
  if (!parse(args, desc,
             "usage: data_prep merge --input FILE.h5|GLOB ... --output FILE.h5 [--chunk-tokens N] [--deflate L]\n\n"
             "Joins token data sets: each split's tokens one after the other, /doc_offsets shifted to\n"
             "match (a shard without them counts as one document). The shards must share vocab_size and\n"
             "tokenizer; the first one's tokenizer is stored. Streams: never holds a shard.\n",
             vm))
    return 0;
  if (chunk < 1) throw UsageError("--chunk-tokens must be at least 1, got " + std::to_string(chunk));
  if (deflate < 0 || deflate > 9) throw UsageError("--deflate must be 0 to 9, got " + std::to_string(deflate));
  std::vector<std::string> files;
  for (const std::string& in : inputs)
    for (const std::string& f : tessera::io::TokenDataset::expand(in)) files.push_back(f);
  // Every shard's splits opened first: a vocabulary that differs stops the merge before writing.
  std::vector<std::string> splits;
  for (const char* s : {"train", "val"})
    if (H5File::open_read(files[0]).has(std::string("/") + s + "/tokens")) splits.push_back(s);
  if (splits.empty()) splits.push_back("train");
  std::vector<std::vector<tessera::io::TokenDataset>> shards(splits.size());
  for (size_t s = 0; s < splits.size(); ++s)
    for (const std::string& f : files) {
      shards[s].push_back(tessera::io::TokenDataset::open(f, splits[s]));
      const tessera::io::TokenDataset& first = shards[s].front();
      const tessera::io::TokenDataset& d = shards[s].back();
      if (d.vocab_size != first.vocab_size || d.tokenizer != first.tokenizer)
        fail("cannot merge: the shards' vocabularies differ: ", files[0], " has vocab_size ", first.vocab_size,
             " (tokenizer ", first.tokenizer, "), ", f, " has vocab_size ", d.vocab_size, " (tokenizer ", d.tokenizer,
             ")");
    }
  const int64_t vocab = shards[0][0].vocab_size;
  AtomicOutput out(output, overwrite, files);
  std::vector<int64_t> totals;
  {
    H5File f = H5File::create(out.tmp());
    constexpr int64_t kBlock = int64_t{1} << 22;
    std::vector<int32_t> block;
    for (size_t s = 0; s < splits.size(); ++s) {
      tessera::io::TokenWriter w(f, "/" + splits[s], vocab, chunk, deflate);
      for (const tessera::io::TokenDataset& d : shards[s]) {
        // Its documents, shifted (none recorded: the shard is one document).
        const H5File in = H5File::open_read(d.path);
        const std::string offsets = d.dataset.substr(0, d.dataset.size() - 6) + "doc_offsets";
        std::vector<int64_t> starts{0};
        if (in.has(offsets)) starts = in.read_i64(offsets, 0, in.shape(offsets)[0]);
        size_t next_doc = 0;
        for (int64_t first = 0; first < d.size(); first += kBlock) {
          const int64_t n = std::min(kBlock, d.size() - first);
          block.resize(static_cast<size_t>(n));
          d.read(first, n, block.data());
          int64_t done = 0;
          while (next_doc < starts.size() && starts[next_doc] < first + n) {
            const int64_t at = starts[next_doc] - first;
            w.append(block.data() + done, at - done);
            w.start_document();
            done = at;
            ++next_doc;
          }
          w.append(block.data() + done, n - done);
        }
      }
      totals.push_back(w.finish());
    }
    // The first shard's attributes (vocabulary, tokenizer and its file).
    const H5File first = H5File::open_read(files[0]);
    f.set_attr("/", "vocab_size", vocab);
    for (const char* key : {"tokenizer", "tokenizer_file", "tokenizer_checksum", "eos_id", "entropy_rate"})
      if (first.has_attr("/", key)) {
        if (std::string(key) == "eos_id") f.set_attr("/", key, first.attr_int("/", key));
        else if (std::string(key) == "entropy_rate") f.set_attr("/", key, first.attr_double("/", key));
        else f.set_attr("/", key, first.attr_string("/", key));
      }
    if (first.has("/tokenizer_file")) f.write("/tokenizer_file", first.read("/tokenizer_file", DType::u8));
    f.set_attr("/", "source", "merge of " + std::to_string(files.size()) + " shards");
    f.flush();
  }
  out.commit();
  std::cout << "wrote " << output << ": " << files.size() << " shards";
  for (size_t s = 0; s < splits.size(); ++s) std::cout << ", " << totals[s] << " " << splits[s] << " tokens";
  std::cout << "\n";
  return 0;
}

int run_import_megatron(const std::vector<std::string>& args) {
  std::string prefix, output, tokenizer_path;
  int64_t vocab = 0, chunk = int64_t{1} << 20;
  double val_fraction = 0.0;
  int deflate = 0;
  bool overwrite = false;
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("input", po::value(&prefix)->required()->value_name("PREFIX"), "the data set's PREFIX.bin and PREFIX.idx")
      ("output", po::value(&output)->required()->value_name("FILE.h5"), "HDF5 file to write")
      ("vocab-size", po::value(&vocab)->required()->value_name("V"),
       "the vocabulary the ids come from (Megatron's files do not record it); every id must be below it")
      ("tokenizer", po::value(&tokenizer_path)->value_name("PATH"),
       "the tokenizer that made the ids (a SentencePiece *.model or a tokenizer.json), stored in the data set")
      ("val-fraction", po::value(&val_fraction)->default_value(0.0, "0")->value_name("F"),
       "one document: the last F of its tokens go to /val; several: each document goes to /val with probability F")
      ("chunk-tokens", po::value(&chunk)->default_value(int64_t{1} << 20)->value_name("N"), "tokens per HDF5 chunk")
      ("deflate", po::value(&deflate)->default_value(0)->value_name("0-9"), "compression level of the chunks (0: none)")
      ("overwrite", po::bool_switch(&overwrite), kOverwriteHelp);
  po::variables_map vm;
  if (!parse(args, desc,
             "usage: data_prep import-megatron --input PREFIX --output FILE.h5 --vocab-size V [--tokenizer PATH]\n"
             "                                 [--val-fraction F] [--chunk-tokens N] [--deflate L] [--overwrite]\n\n"
             "Converts Megatron-LM's indexed data set (PREFIX.idx, \"MMIDIDX\" version 1, and PREFIX.bin) into\n"
             "a token data set: each document's sequences joined, /doc_offsets at the documents' starts\n"
             "(empty documents are dropped). The index is checked whole before anything is written (magic,\n"
             "version, dtype, counts, pointers, the .bin's size, document indices) and every token against\n"
             "--vocab-size as it is copied. Streams: holds a block of tokens, never the corpus.\n",
             vm))
    return 0;
  if (vocab < 1 || vocab > (int64_t{1} << 31))
    throw UsageError("--vocab-size must be in [1, 2^31], got " + std::to_string(vocab));
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    throw UsageError("--val-fraction must be in [0, 1), got " + std::to_string(val_fraction));
  if (chunk < 1) throw UsageError("--chunk-tokens must be at least 1, got " + std::to_string(chunk));
  if (deflate < 0 || deflate > 9) throw UsageError("--deflate must be 0 to 9, got " + std::to_string(deflate));
  std::string kind = "megatron", tokenizer_bytes;
  std::vector<std::string> inputs = {prefix + ".idx", prefix + ".bin"};
  if (!tokenizer_path.empty()) {
    kind = tessera::text::tokenizer_kind_of_path(tokenizer_path);
    tokenizer_bytes = read_whole_file(tokenizer_path, "--tokenizer");
    const int64_t tv = tessera::text::make_tokenizer(kind, tokenizer_bytes, tokenizer_path)->vocab_size();
    if (vocab < tv)
      throw UsageError("--vocab-size " + std::to_string(vocab) + " is smaller than the vocabulary of --tokenizer " +
                       tokenizer_path + " (" + std::to_string(tv) + ")");
    inputs.push_back(tokenizer_path);
  }
  const tessera::io::MegatronDataset mg = tessera::io::MegatronDataset::open(prefix);
  if (mg.tokens() < 2) fail(mg.bin_path(), ": ", mg.tokens(), " tokens: too few to train on (at least 2)");
  const bool one_document = mg.documents() == 1;

  AtomicOutput out(output, overwrite, inputs);
  int64_t n_train = 0, n_val = 0, d_train = 0, d_val = 0, empty = 0;
  {
    H5File f = H5File::create(out.tmp());
    tessera::io::TokenWriter train(f, "/train", vocab, chunk, deflate);
    std::optional<tessera::io::TokenWriter> val;
    if (val_fraction > 0) val.emplace(f, "/val", vocab, chunk, deflate);
    // The document's tokens go to `into`; with one document, the last F of them go to /val.
    tessera::io::TokenWriter* into = &train;
    int64_t to_train = 0;  // one document: tokens still for /train
    mg.for_each_document(
        vocab,
        [&](int64_t d, int64_t n) {
          if (n == 0) {
            ++empty;
            into = nullptr;
            return;
          }
          if (one_document) {
            const auto nv = static_cast<int64_t>(std::floor(static_cast<double>(n) * val_fraction));
            if (val && (nv < 2 || n - nv < 2))
              fail(mg.bin_path(), " has one document of ", n, " tokens: too few to split with --val-fraction ",
                   val_fraction, " (each split needs at least 2 tokens)");
            to_train = n - nv;
            into = &train;
          } else {
            // As `data_prep text`: document d goes to /val when Philox (0, "data_prep.val", d) falls below F.
            const tessera::PhiloxCounter w = tessera::philox_bits(0, tessera::stream_id("data_prep.val"), d);
            const bool to_val = val && static_cast<double>(w[0]) / 4294967296.0 < val_fraction;
            into = to_val ? &*val : &train;
            to_train = -1;
          }
          into->start_document();
        },
        [&](const int32_t* ids, int64_t n) {
          if (into == nullptr) return;
          if (to_train >= 0) {  // one document split at to_train
            const int64_t a = std::min(n, to_train);
            train.append(ids, a);
            to_train -= a;
            if (a < n) {
              if (val->size() == 0) val->start_document();
              val->append(ids + a, n - a);
            }
          } else {
            into->append(ids, n);
          }
        });
    n_train = train.finish();
    d_train = train.documents();
    if (val) {
      n_val = val->finish();
      d_val = val->documents();
    }
    if (n_train < 2) fail(prefix, ": the documents give ", n_train, " training tokens: too few (at least 2)");
    if (val && n_val == 0) fail("no document of ", prefix, " went to /val: use more documents, or --val-fraction 0");
    f.set_attr("/", "vocab_size", vocab);
    if (tokenizer_path.empty()) f.set_attr("/", "tokenizer", std::string("megatron"));
    else tessera::text::store_tokenizer(f, kind, tokenizer_bytes, fs::path(tokenizer_path).filename().string());
    f.set_attr("/", "source", "megatron " + fs::path(prefix).filename().string() + " (" + mg.dtype_name() + ")");
    f.flush();
  }
  out.commit();
  std::cout << "wrote " << output << ": " << n_train << " train and " << n_val << " val tokens in " << d_train
            << " and " << d_val << " documents (from " << mg.sequences() << " sequences, " << mg.dtype_name()
            << ", vocab " << vocab << ")";
  if (empty > 0) std::cout << "; " << empty << " empty documents dropped";
  std::cout << "\n";
  return 0;
}

int run_synth(const std::vector<std::string>& args) {
  int64_t vocab = 0, tokens = 0, val_tokens = -1, branching = 4;
  uint64_t seed = 0;
  std::string output;
  bool overwrite = false;
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("vocab", po::value(&vocab)->required()->value_name("V"), "vocabulary size V (at least 2)")
      ("tokens", po::value(&tokens)->required()->value_name("N"), "training tokens N (at least 2)")
      ("seed", po::value(&seed)->required()->value_name("S"), "seed of the chain and of the samples")
      ("output", po::value(&output)->required()->value_name("FILE.h5"), "HDF5 file to write")
      ("val-tokens", po::value(&val_tokens)->value_name("M"), "validation tokens M (default N/10)")
      ("branching", po::value(&branching)->default_value(4)->value_name("K"), "successors per state K (at least 2)")
      ("overwrite", po::bool_switch(&overwrite), kOverwriteHelp);
  po::variables_map vm;
  if (!parse(args, desc,
             "usage: data_prep synth --vocab V --tokens N --seed S --output FILE.h5\n"
             "                       [--val-tokens M] [--branching K] [--overwrite]\n\n"
             "Samples N train and M val tokens from a random first-order Markov chain in which\n"
             "each state has K successors, started from its stationary distribution. The exact\n"
             "entropy rate (nats/token), the best loss any model can reach, is printed and stored\n"
             "as the root attribute entropy_rate.\n",
             vm))
    return 0;
  if (vocab < 2) throw UsageError("--vocab must be at least 2, got " + std::to_string(vocab));
  if (vocab > (int64_t{1} << 31) - 1) throw UsageError("--vocab must fit in int32, got " + std::to_string(vocab));
  if (tokens < 2) throw UsageError("--tokens must be at least 2, got " + std::to_string(tokens));
  if (branching < 2) throw UsageError("--branching must be at least 2, got " + std::to_string(branching));
  if (!vm.count("val-tokens")) val_tokens = tokens / 10;
  if (val_tokens < 0) throw UsageError("--val-tokens must not be negative, got " + std::to_string(val_tokens));

  AtomicOutput out(output, overwrite, {});
  const tessera::io::MarkovSource source = tessera::io::MarkovSource::random(vocab, branching, seed);
  // Sampled and written a block at a time (the corpus is never held); the empirical entropy of
  // the train tokens is summed as they go.
  double nll = 0;
  auto write_split = [&](H5File& f, const char* group, int64_t n, const char* stream, bool count_nll) {
    tessera::io::TokenWriter w(f, group, vocab);
    std::vector<int32_t> block(static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 20)));
    int32_t previous = 0;
    for (int64_t first = 0; first < n; first += static_cast<int64_t>(block.size())) {
      const int64_t m = std::min<int64_t>(n - first, static_cast<int64_t>(block.size()));
      source.sample_block(first, m, previous, seed, tessera::stream_id(stream), block.data());
      if (count_nll)
        for (int64_t i = 0; i < m; ++i)
          if (first + i > 0) nll -= std::log(source.prob(i == 0 ? previous : block[i - 1], block[i]));
      w.append(block.data(), m);
      previous = block[static_cast<size_t>(m - 1)];
    }
    w.finish();
  };
  {
    H5File f = H5File::create(out.tmp());
    write_split(f, "/train", tokens, "markov.sample.train", true);
    if (val_tokens > 0) write_split(f, "/val", val_tokens, "markov.sample.val", false);
    f.set_attr("/", "vocab_size", vocab);
    f.set_attr("/", "tokenizer", "synthetic-markov");
    f.set_attr("/", "entropy_rate", source.entropy_rate());
    f.set_attr("/", "seed", static_cast<int64_t>(seed));
    f.set_attr("/", "branching", std::min(branching, vocab));
    f.flush();
  }
  out.commit();
  const double empirical = nll / static_cast<double>(tokens - 1);
  std::printf("wrote %s: %lld train and %lld val tokens, vocab %lld, branching %lld\n", output.c_str(),
              static_cast<long long>(tokens), static_cast<long long>(val_tokens),
              static_cast<long long>(vocab), static_cast<long long>(std::min(branching, vocab)));
  std::printf("entropy rate: %.6f nats/token (%.6f bits/token)\n", source.entropy_rate(),
              source.entropy_rate() / std::log(2.0));
  std::printf("empirical entropy of the train tokens: %.6f nats/token\n", empirical);
  return 0;
}

// Writes an image data set through AtomicOutput and prints what it holds.
void write_images(AtomicOutput& out, const std::string& output, const tessera::io::ImageSplits& data,
                  const std::string& source) {
  {
    H5File f = H5File::create(out.tmp());
    tessera::io::write_image_dataset(f, data);
    f.set_attr("/", "source", source);
    f.flush();
  }
  out.commit();
  const tessera::io::ImageDataset& train = data.train;
  std::printf("wrote %s: %lld train and %lld test images of %lldx%lldx%lld (H x W x C), %lld classes\n",
              output.c_str(), static_cast<long long>(train.size()), static_cast<long long>(data.test.size()),
              static_cast<long long>(train.height), static_cast<long long>(train.width),
              static_cast<long long>(train.channels), static_cast<long long>(train.num_classes()));
  std::printf("%-6s %-16s %8s %8s\n", "label", "class", "train", "test");
  std::vector<int64_t> train_count(static_cast<size_t>(train.num_classes())), test_count(train_count);
  for (int32_t l : train.labels) ++train_count[static_cast<size_t>(l)];
  for (int32_t l : data.test.labels) ++test_count[static_cast<size_t>(l)];
  for (size_t c = 0; c < train_count.size(); ++c)
    std::printf("%-6zu %-16s %8lld %8lld\n", c, train.class_names[c].c_str(),
                static_cast<long long>(train_count[c]), static_cast<long long>(test_count[c]));
  const tessera::io::ChannelStats stats = tessera::io::channel_stats(train);
  std::printf("train pixels in [0, 1], per channel: mean");
  for (float m : stats.mean) std::printf(" %.4f", m);
  std::printf(", std");
  for (float s : stats.std) std::printf(" %.4f", s);
  std::printf("\n");
}

int run_cifar10(const std::vector<std::string>& args) {
  std::string input, output;
  bool overwrite = false;
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("input", po::value(&input)->required()->value_name("DIR"), "folder of the CIFAR-10 binary version")
      ("output", po::value(&output)->required()->value_name("FILE.h5"), "HDF5 file to write")
      ("overwrite", po::bool_switch(&overwrite), kOverwriteHelp);
  po::variables_map vm;
  if (!parse(args, desc,
             "usage: data_prep cifar10 --input DIR --output FILE.h5 [--overwrite]\n\n"
             "Converts the CIFAR-10 binary version in DIR (data_batch_1..5.bin: 50000 train images,\n"
             "test_batch.bin: 10000 test images, batches.meta.txt: the 10 class names) to an image\n"
             "data set: uint8 [N, 32, 32, 3] images (HWC) and int32 labels under /train and /test.\n",
             vm))
    return 0;
  AtomicOutput out(output, overwrite, tessera::io::cifar10_files(input));
  const tessera::io::ImageSplits data = tessera::io::read_cifar10(input);
  write_images(out, output, data, "cifar10-binary");
  return 0;
}

int run_synth_images(const std::vector<std::string>& args) {
  tessera::io::SynthImageSpec spec;
  std::string output;
  bool overwrite = false;
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("classes", po::value(&spec.classes)->default_value(10)->value_name("K"), "classes K (2 to 1000)")
      ("train", po::value(&spec.train)->default_value(1000)->value_name("N"), "train images N (at least 1)")
      ("test", po::value(&spec.test)->default_value(200)->value_name("M"), "test images M (at least 1)")
      ("size", po::value(&spec.size)->default_value(32)->value_name("S"), "image side S (1 to 1024): S x S x 3 images")
      ("seed", po::value(&spec.seed)->required()->value_name("S"), "seed of the phases and the noise")
      ("output", po::value(&output)->required()->value_name("FILE.h5"), "HDF5 file to write")
      ("overwrite", po::bool_switch(&overwrite), kOverwriteHelp);
  po::variables_map vm;
  if (!parse(args, desc,
             "usage: data_prep synth-images --seed X --output FILE.h5\n"
             "                              [--classes K] [--train N] [--test M] [--size S] [--overwrite]\n\n"
             "Image i of a split has label i mod K: a tint of the class's colour and a grating at\n"
             "the class's angle, with a random phase and Philox noise: a small model learns it.\n",
             vm))
    return 0;
  if (spec.classes < 2 || spec.classes > 1000)
    throw UsageError("--classes must be in [2, 1000], got " + std::to_string(spec.classes));
  if (spec.train < 1) throw UsageError("--train must be at least 1, got " + std::to_string(spec.train));
  if (spec.test < 1) throw UsageError("--test must be at least 1, got " + std::to_string(spec.test));
  if (spec.size < 1 || spec.size > 1024)
    throw UsageError("--size must be in [1, 1024], got " + std::to_string(spec.size));
  const double bytes = (static_cast<double>(spec.train) + static_cast<double>(spec.test)) *
                       static_cast<double>(spec.size * spec.size * 3);
  if (bytes > 8e9)
    throw UsageError("--train, --test and --size ask for " + std::to_string(static_cast<int64_t>(bytes / 1e9)) +
                     " GB of pixels (at most 8)");
  AtomicOutput out(output, overwrite, {});
  write_images(out, output, tessera::io::make_synth_images(spec), "synthetic-images");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.empty()) throw UsageError("missing command (" + std::string(kCommands) + "); run data_prep --help");
    const std::string command = args[0];
    args.erase(args.begin());
    if (command == "--help" || command == "-h" || command == "help") {
      std::cout << kUsage << "\nExample:\n" << kExample << "\n";
      return 0;
    }
    if (command == "--version") {
      std::cout << tessera::cli::version_text("data_prep");
      return 0;
    }
    if (command == "text") return run_text(args);
    if (command == "decode") return run_decode(args);
    if (command == "verify") return run_verify(args);
    if (command == "merge") return run_merge(args);
    if (command == "import-megatron") return run_import_megatron(args);
    if (command == "synth") return run_synth(args);
    if (command == "cifar10") return run_cifar10(args);
    if (command == "synth-images") return run_synth_images(args);
    if (!command.empty() && command[0] == '-')
      throw UsageError("expected a command (" + std::string(kCommands) + ") before the option '" + command + "'");
    throw UsageError("unknown command '" + command + "' (expected " + kCommands + ")");
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const po::error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const tessera::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

// data_prep text (documents from files, folders and JSONL, tokenised and written as they come) and
// decode (a token data set's ids back to text with its stored tokenizer).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/data_prep/data_prep_common.h"
#include "core/philox.h"
#include "io/hdf5_file.h"
#include "io/token_dataset.h"
#include "io/token_writer.h"
#include "text/stored_tokenizer.h"
#include "text/tokenizer.h"

namespace data_prep {

using tessera::io::H5File;

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
  std::string text_key;
  TextTokenOptions o;
  po::options_description desc("Options");
  o.declare(
      desc,
      [&](po::options_description& d) {
        d.add_options()("input", po::value(&inputs_given)->required()->multitoken()->value_name("FILE|DIR ..."),
                        "text files, folders of them, or JSONL files: each file (or JSONL line) is one document");
      },
      [&](po::options_description& d) {
        d.add_options()("text-key", po::value(&text_key)->default_value("text")->value_name("KEY"),
                        "*.jsonl and *.ndjson inputs: one document a line, its text under KEY");
      },
      "token put between documents (default: see below)",
      "one document: the last F of its tokens go to /val; several: each document goes to /val with probability F");
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
  o.check();

  std::vector<std::string> inputs = inputs_given;
  const ChosenTokenizer chosen = o.choose(vm, inputs);
  const std::string& kind = chosen.kind;
  const tessera::text::Tokenizer& tokenizer = *chosen.tokenizer;
  const int64_t vocab = chosen.vocab();
  DocumentSource docs(inputs_given, text_key);
  const bool one_document = docs.files().size() == 1 && !docs.jsonl(docs.files()[0]);

  AtomicOutput out(o.output, o.overwrite, inputs);
  int64_t n_train = 0, n_val = 0, d_train = 0, d_val = 0;
  {
    H5File f = H5File::create(out.tmp());
    tessera::io::TokenWriter train(f, "/train", vocab, o.storage.chunk, o.storage.deflate);
    std::optional<tessera::io::TokenWriter> val;
    if (o.val_fraction > 0) val.emplace(f, "/val", vocab, o.storage.chunk, o.storage.deflate);
    std::string text, where;
    int64_t index = 0;
    while (docs.next(text, where)) {
      if (one_document && text.empty()) fail("input ", where, " is empty: no tokens to write");
      std::vector<int32_t> tokens;
      try {
        tokens = tokenizer.encode(text);
      } catch (const tessera::Error& e) {
        fail("cannot tokenise input ", where, ": ", e.what());
      }
      if (one_document) {
        // One document: the last F of its tokens are the validation split (as always).
        const auto n = static_cast<int64_t>(tokens.size());
        const auto nv = static_cast<int64_t>(std::floor(static_cast<double>(n) * o.val_fraction));
        if (n < 2 || (o.val_fraction > 0 && (nv < 2 || n - nv < 2)))
          fail("input ", where, " has only ", n, " tokens: too few to split into train and val with --val-fraction ",
               o.val_fraction, " (each split needs at least 2 tokens)");
        train.start_document();
        train.append(tokens.data(), n - nv);
        if (val) {
          val->start_document();
          val->append(tokens.data() + (n - nv), nv);
        }
      } else {
        // Several: document i goes to /val when Philox (0, "data_prep.val", i) falls below F.
        const tessera::PhiloxCounter w = tessera::philox_bits(0, tessera::stream_id("data_prep.val"), index++);
        const bool to_val = val && static_cast<double>(w[0]) / 4294967296.0 < o.val_fraction;
        tessera::io::TokenWriter& into = to_val ? *val : train;
        // The end-of-document token closes the split's previous document: it goes between documents.
        if (o.eos_id >= 0 && into.size() > 0) {
          const auto eos = static_cast<int32_t>(o.eos_id);
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
    if (o.eos_id >= 0) f.set_attr("/", "eos_id", o.eos_id);
    tessera::text::store_tokenizer(f, kind, chosen.bytes, fs::path(o.tokenizer_path).filename().string());
    f.set_attr("/", "source", fs::path(inputs_given[0]).filename().string());
    f.flush();
  }
  out.commit();
  std::cout << "wrote " << o.output << ": " << n_train << " train and " << n_val << " val tokens";
  if (!one_document) std::cout << " in " << d_train << " and " << d_val << " documents";
  std::cout << " (" << (o.tokenizer_path.empty() ? kind : kind + " " + o.tokenizer_path) << ", vocab " << vocab << ")\n";
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

}  // namespace data_prep

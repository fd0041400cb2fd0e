// data_prep verify (a whole token data set scanned) and merge (token shards joined into one).
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "apps/data_prep/data_prep_common.h"
#include "core/tensor.h"
#include "io/hdf5_file.h"
#include "io/token_dataset.h"
#include "io/token_writer.h"

namespace data_prep {

using tessera::DType;
using tessera::io::H5File;

// Scans one split of one file: every token in the vocabulary, every loss mask value 0 or 1,
// /doc_offsets 1-D int64, starting at 0, increasing, inside the tokens. Returns the problems found (at most a few of each kind).
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
  std::vector<uint8_t> mask(data.has_mask() ? block.size() : 0);
  for (int64_t first = 0; first < tokens; first += kBlock) {
    const int64_t n = std::min(kBlock, tokens - first);
    try {
      data.read(first, n, block.data());
      if (data.has_mask()) data.read_mask(first, n, mask.data());  // every value 0 or 1
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
                 " and checks it against vocab_size, every loss mask value (0 or 1), and every /doc_offsets entry (int64, from 0, increasing,\n"
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
  TokenStorage storage;
  bool overwrite = false;
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("input", po::value(&inputs)->required()->multitoken()->value_name("FILE.h5|GLOB ..."),
       "token data sets (shards), joined in the order given (a glob's files in name order)")
      ("output", po::value(&output)->required()->value_name("FILE.h5"), "HDF5 file to write")
      ("overwrite", po::bool_switch(&overwrite), kOverwriteHelp);
  storage.add_to(desc);
  po::variables_map vm;
  if (!parse(args, desc,
             "usage: data_prep merge --input FILE.h5|GLOB ... --output FILE.h5 [--chunk-tokens N] [--deflate L]\n\n"
             "Joins token data sets: each split's tokens one after the other, /doc_offsets shifted to\n"
             "match (a shard without them counts as one document). The shards must share vocab_size and\n"
             "tokenizer; the first one's tokenizer is stored. Loss masks (data_prep sft) are joined too: the\n"
             "shards must all have one or none. Streams: never holds a shard.\n",
             vm))
    return 0;
  storage.check();
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
      if (d.has_mask() != first.has_mask())
        fail("cannot merge: ", files[0], (first.has_mask() ? " has a" : " has no"), " loss mask, ", f,
             (first.has_mask() ? " has none" : " has one"), " (", splits[s], " split)");
    }
  const int64_t vocab = shards[0][0].vocab_size;
  AtomicOutput out(output, overwrite, files);
  std::vector<int64_t> totals;
  {
    H5File f = H5File::create(out.tmp());
    constexpr int64_t kBlock = int64_t{1} << 22;
    std::vector<int32_t> block;
    std::vector<uint8_t> mask;
    for (size_t s = 0; s < splits.size(); ++s) {
      const bool masked = shards[s].front().has_mask();
      tessera::io::TokenWriter w(f, "/" + splits[s], vocab, storage.chunk, storage.deflate, masked);
      const auto put = [&](int64_t from, int64_t n) {
        if (masked) {
          w.append(block.data() + from, mask.data() + from, n);
        } else {
          w.append(block.data() + from, n);
        }
      };
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
          if (masked) {
            mask.resize(static_cast<size_t>(n));
            d.read_mask(first, n, mask.data());
          }
          int64_t done = 0;
          while (next_doc < starts.size() && starts[next_doc] < first + n) {
            const int64_t at = starts[next_doc] - first;
            put(done, at - done);
            w.start_document();
            done = at;
            ++next_doc;
          }
          put(done, n - done);
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

}  // namespace data_prep

// data_prep import-megatron: a Megatron-LM indexed data set (PREFIX.bin + PREFIX.idx) converted
// into a token data set as it is read.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "apps/data_prep/data_prep_common.h"
#include "core/philox.h"
#include "io/hdf5_file.h"
#include "io/megatron_dataset.h"
#include "io/token_writer.h"
#include "text/stored_tokenizer.h"
#include "text/tokenizer.h"

namespace data_prep {

using tessera::io::H5File;

int run_import_megatron(const std::vector<std::string>& args) {
  std::string prefix, output, tokenizer_path;
  int64_t vocab = 0;
  double val_fraction = 0.0;
  TokenStorage storage;
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
      ("overwrite", po::bool_switch(&overwrite), kOverwriteHelp);
  storage.add_to(desc);
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
  storage.check();
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
    tessera::io::TokenWriter train(f, "/train", vocab, storage.chunk, storage.deflate);
    std::optional<tessera::io::TokenWriter> val;
    if (val_fraction > 0) val.emplace(f, "/val", vocab, storage.chunk, storage.deflate);
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

}  // namespace data_prep

// data_prep synth (tokens of a random sparse Markov chain, its entropy rate stored), cifar10 (the
// official binary files) and synth-images (a learnable image set).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/data_prep/data_prep_common.h"
#include "core/philox.h"
#include "io/cifar10.h"
#include "io/hdf5_file.h"
#include "io/image_dataset.h"
#include "io/markov_source.h"
#include "io/synth_images.h"
#include "io/token_writer.h"

namespace data_prep {

using tessera::io::H5File;

int run_synth(const std::vector<std::string>& args) {
  int64_t vocab = 0, tokens = 0, val_tokens = -1, branching = 4, document_tokens = 0;
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
      ("document-tokens", po::value(&document_tokens)->value_name("L"),
       "start a document every L tokens in /doc_offsets (default: each split one document)")
      ("overwrite", po::bool_switch(&overwrite), kOverwriteHelp);
  po::variables_map vm;
  if (!parse(args, desc,
             "usage: data_prep synth --vocab V --tokens N --seed S --output FILE.h5\n"
             "                       [--val-tokens M] [--branching K] [--document-tokens L] [--overwrite]\n\n"
             "Samples N train and M val tokens from a random first-order Markov chain in which\n"
             "each state has K successors, started from its stationary distribution. The exact\n"
             "entropy rate (nats/token), the best loss any model can reach, is printed and stored\n"
             "as the root attribute entropy_rate. The chain runs on across documents: --document-tokens\n"
             "only marks where they start (a file of many documents for --document-mask).\n",
             vm))
    return 0;
  if (vocab < 2) throw UsageError("--vocab must be at least 2, got " + std::to_string(vocab));
  if (vocab > (int64_t{1} << 31) - 1) throw UsageError("--vocab must fit in int32, got " + std::to_string(vocab));
  if (tokens < 2) throw UsageError("--tokens must be at least 2, got " + std::to_string(tokens));
  if (branching < 2) throw UsageError("--branching must be at least 2, got " + std::to_string(branching));
  if (vm.count("document-tokens") && document_tokens < 1)
    throw UsageError("--document-tokens must be at least 1, got " + std::to_string(document_tokens));
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
      // Cut at each document's first token (every document_tokens tokens), else appended whole.
      for (int64_t i = 0; i < m;) {
        const int64_t at = first + i;
        int64_t take = m - i;
        if (document_tokens > 0) {
          if (at % document_tokens == 0) w.start_document();
          take = std::min(take, document_tokens - at % document_tokens);
        }
        w.append(block.data() + i, take);
        i += take;
      }
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

}  // namespace data_prep

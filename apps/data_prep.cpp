// data_prep: makes the trainers' HDF5 data sets: token sets `text` (a file's tokens: bytes, or a
// SentencePiece / Hugging Face tokenizer's, stored with them; `decode` turns them back into text) and
// `synth` (a random sparse Markov chain whose entropy rate, the loss floor, is stored with it); image
// sets `cifar10` (the official binary files) and `synth-images` (learnable class patterns).
#include <boost/program_options.hpp>
#include <sys/stat.h>
#include <unistd.h>

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
#include "io/synth_images.h"
#include "io/token_dataset.h"
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
    "  text          tokens of a text file: bytes (vocab 256), or a tokenizer's (--tokenizer)\n"
    "  decode        a token data set's ids back to text, with the tokenizer stored in it\n"
    "  synth         tokens sampled from a random sparse Markov chain, with its exact entropy rate\n"
    "  cifar10       the CIFAR-10 binary version (data_batch_1..5.bin, test_batch.bin, batches.meta.txt)\n"
    "  synth-images  a small learnable image set: a coloured pattern per class plus noise\n"
    "\n"
    "Run `data_prep <command> --help` for the options of a command, `data_prep --version` for the build.\n";

constexpr const char* kCommands = "text, decode, synth, cifar10 or synth-images";

constexpr const char* kExample =
    "  data_prep synth --vocab 64 --tokens 200000 --seed 1 --output data.h5\n"
    "  data_prep text --input book.txt --output book.h5 --val-fraction 0.1\n"
    "  data_prep text --input book.txt --tokenizer tokenizer.json --output book.h5\n"
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

// Tokens as a 1-D tensor: uint16 when the vocabulary fits, else int32.
Tensor token_tensor(const std::vector<int32_t>& tokens, int64_t vocab) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (vocab <= 65536) {
    Tensor t = Tensor::empty({n}, DType::u16);
    uint16_t* p = t.data<uint16_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<uint16_t>(tokens[i]);
    return t;
  }
  Tensor t = Tensor::empty({n}, DType::i32);
  std::copy(tokens.begin(), tokens.end(), t.data<int32_t>());
  return t;
}

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

int run_text(const std::vector<std::string>& args) {
  std::string input, output, tokenizer_path;
  double val_fraction = 0.1;
  bool overwrite = false;
  po::options_description desc("Options");
  desc.add_options()
      ("help,h", "show this help")
      ("input", po::value(&input)->required()->value_name("FILE"), "text file to tokenise")
      ("output", po::value(&output)->required()->value_name("FILE.h5"), "HDF5 file to write")
      ("tokenizer", po::value(&tokenizer_path)->value_name("PATH"),
       "a SentencePiece *.model or a Hugging Face tokenizer.json (byte-level BPE); default: bytes")
      ("val-fraction", po::value(&val_fraction)->default_value(0.1, "0.1")->value_name("F"),
       "fraction of the tokens, taken from the end, that goes to /val")
      ("overwrite", po::bool_switch(&overwrite), kOverwriteHelp);
  po::variables_map vm;
  if (!parse(args, desc,
             "usage: data_prep text --input FILE --output FILE.h5 [--tokenizer PATH] [--val-fraction F]\n"
             "                      [--overwrite]\n\n"
             "Tokens of FILE: the last F of them go to /val/tokens, the rest to /train/tokens (uint16\n"
             "when the vocabulary fits, else int32). Without --tokenizer each byte is a token (vocab\n"
             "256). With one, vocab_size is the tokenizer's and its file is stored in the data set\n"
             "(/tokenizer_file, attributes tokenizer, tokenizer_file, tokenizer_checksum), so that\n"
             "`data_prep decode` and later tools read the ids without it. SentencePiece encodes line\n"
             "by line (as spm_encode does), the model's EOS id after each line; a tokenizer.json's\n"
             "text must be UTF-8 and is encoded whole, with no BOS/EOS added.\n",
             vm))
    return 0;
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    throw UsageError("--val-fraction must be in [0, 1), got " + std::to_string(val_fraction));

  std::string kind = "bytes", tokenizer_bytes;
  std::vector<std::string> inputs{input};
  if (!tokenizer_path.empty()) {
    kind = tessera::text::tokenizer_kind_of_path(tokenizer_path);
    tokenizer_bytes = read_whole_file(tokenizer_path, "--tokenizer");
    inputs.push_back(tokenizer_path);
  }
  const std::unique_ptr<tessera::text::Tokenizer> tokenizer =
      tessera::text::make_tokenizer(kind, tokenizer_bytes, tokenizer_path);
  const std::string text = read_whole_file(input, "input");
  if (text.empty()) fail("input ", input, " is empty: no tokens to write");
  std::vector<int32_t> tokens;
  try {
    tokens = tokenizer->encode(text);
  } catch (const tessera::Error& e) {
    fail("cannot tokenise input ", input, ": ", e.what());
  }
  const int64_t vocab = tokenizer->vocab_size();

  const auto n = static_cast<int64_t>(tokens.size());
  const auto n_val = static_cast<int64_t>(std::floor(static_cast<double>(n) * val_fraction));
  const int64_t n_train = n - n_val;
  if (n < 2 || (val_fraction > 0 && (n_val < 2 || n_train < 2)))
    fail("input ", input, " has only ", n, " tokens: too few to split into train and val with --val-fraction ",
         val_fraction, " (each split needs at least 2 tokens)");

  AtomicOutput out(output, overwrite, inputs);
  {
    H5File f = H5File::create(out.tmp());
    f.write("/train/tokens", token_tensor({tokens.begin(), tokens.begin() + n_train}, vocab));
    if (n_val > 0) f.write("/val/tokens", token_tensor({tokens.begin() + n_train, tokens.end()}, vocab));
    f.set_attr("/", "vocab_size", vocab);
    tessera::text::store_tokenizer(f, kind, tokenizer_bytes, fs::path(tokenizer_path).filename().string());
    f.set_attr("/", "source", fs::path(input).filename().string());
    f.flush();
  }
  out.commit();
  std::cout << "wrote " << output << ": " << n_train << " train and " << n_val << " val tokens ("
            << (tokenizer_path.empty() ? kind : kind + " " + tokenizer_path) << ", vocab " << vocab << ")\n";
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
  const std::vector<int32_t> ids(data.tokens.begin() + start, data.tokens.begin() + start + count);
  const std::string text = tokenizer->decode(ids);
  std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::cout.flush();
  if (!std::cout) fail("cannot write the decoded text to standard output");
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
  const std::vector<int32_t> train = source.sample(tokens, seed, tessera::stream_id("markov.sample.train"));
  const std::vector<int32_t> val = source.sample(val_tokens, seed, tessera::stream_id("markov.sample.val"));
  {
    H5File f = H5File::create(out.tmp());
    f.write("/train/tokens", token_tensor(train, vocab));
    if (val_tokens > 0) f.write("/val/tokens", token_tensor(val, vocab));
    f.set_attr("/", "vocab_size", vocab);
    f.set_attr("/", "tokenizer", "synthetic-markov");
    f.set_attr("/", "entropy_rate", source.entropy_rate());
    f.set_attr("/", "seed", static_cast<int64_t>(seed));
    f.set_attr("/", "branching", std::min(branching, vocab));
    f.flush();
  }
  out.commit();
  const double empirical = source.mean_nll(train);
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

// data_prep: makes the trainers' HDF5 data sets: token sets `text` (a file's tokens: bytes, or a
// SentencePiece / Hugging Face tokenizer's, stored with them; `decode` turns them back into text; `sft`
// instruction data with a loss mask) and
// `synth` (a random sparse Markov chain whose entropy rate, the loss floor, is stored with it); image
// sets `cifar10` (the official binary files) and `synth-images` (learnable class patterns); `merge` joins
// token shards and `import-megatron` converts Megatron-LM indexed data sets (.bin/.idx).
#include <iostream>
#include <string>
#include <vector>

#include "apps/common/cli.h"
#include "apps/data_prep/commands.h"
#include "apps/data_prep/data_prep_common.h"

using namespace data_prep;

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
    "  sft           instruction data (JSONL prompt/response) as tokens with a loss mask on the responses\n"
    "  merge         joins token data sets (shards) into one\n"
    "  import-megatron  converts a Megatron-LM indexed data set (PREFIX.bin + PREFIX.idx)\n"
    "  verify        scans a whole token data set: every token in the vocabulary, /doc_offsets in order\n"
    "  decode        a token data set's ids back to text, with the tokenizer stored in it\n"
    "  synth         tokens sampled from a random sparse Markov chain, with its exact entropy rate\n"
    "  cifar10       the CIFAR-10 binary version (data_batch_1..5.bin, test_batch.bin, batches.meta.txt)\n"
    "  synth-images  a small learnable image set: a coloured pattern per class plus noise\n"
    "\n"
    "Run `data_prep <command> --help` for the options of a command, `data_prep --version` for the build.\n";

constexpr const char* kCommands = "text, sft, merge, import-megatron, verify, decode, synth, cifar10 or synth-images";

}  // namespace

namespace data_prep {
const char* const kExample =
    "  data_prep synth --vocab 64 --tokens 200000 --seed 1 --output data.h5\n"
    "  data_prep text --input book.txt --output book.h5 --val-fraction 0.1\n"
    "  data_prep text --input book.txt --tokenizer tokenizer.json --output book.h5\n"
    "  data_prep text --input corpus.jsonl --text-key text --output corpus.h5\n"
    "  data_prep sft --input chat.jsonl --tokenizer tokenizer.json --output chat.h5\n"
    "  data_prep merge --input 'shards/shard_*.h5' --output all.h5\n"
    "  data_prep import-megatron --input corpus_text_document --vocab-size 50257 --output corpus.h5\n"
    "  data_prep verify all.h5\n"
    "  data_prep decode --input book.h5 --split val --start 0 --count 100\n"
    "  data_prep synth-images --classes 10 --train 2000 --test 400 --size 32 --seed 1 --output synth.h5";
}  // namespace data_prep

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
    if (command == "sft") return run_sft(args);
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

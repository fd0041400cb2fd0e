// data_prep sft: instruction data (JSONL, a prompt and a response a line) tokenised and packed into
// a token data set with a loss mask: 1 on each response's tokens and the end-of-example token after
// it, 0 on the prompt's. Malformed lines are counted and named; more than --max-bad-lines fail.
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/data_prep/commands.h"
#include "apps/data_prep/data_prep_common.h"
#include "core/philox.h"
#include "io/hdf5_file.h"
#include "io/token_writer.h"
#include "text/stored_tokenizer.h"
#include "text/tokenizer.h"

namespace data_prep {

namespace {

constexpr int kNamedBadLines = 5;  // malformed lines named in the message; the rest only counted

// One JSONL line's prompt and response, or why the line is malformed.
struct Example {
  std::string prompt, response, problem;
};

Example parse_example(const std::string& line, const std::string& prompt_key, const std::string& response_key) {
  Example e;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const std::exception&) {
    e.problem = "not JSON";
    return e;
  }
  if (!j.is_object()) {
    e.problem = "not a JSON object";
    return e;
  }
  for (const std::string* key : {&prompt_key, &response_key}) {
    if (!j.contains(*key)) {
      e.problem = "no key '" + *key + "'";
      return e;
    }
    if (!j[*key].is_string()) {
      e.problem = "'" + *key + "' is not a string";
      return e;
    }
  }
  e.prompt = j[prompt_key].get<std::string>();
  e.response = j[response_key].get<std::string>();
  return e;
}

}  // namespace

int run_sft(const std::vector<std::string>& args) {
  std::string input, prompt_key, response_key;
  int64_t max_bad_lines = 0;
  TextTokenOptions o;
  po::options_description desc("Options");
  o.declare(
      desc,
      [&](po::options_description& d) {
        d.add_options()("input", po::value(&input)->required()->value_name("FILE.jsonl"),
                        "one example a line: a JSON object");
      },
      [&](po::options_description& d) {
        d.add_options()
            ("prompt-key", po::value(&prompt_key)->default_value("prompt")->value_name("KEY"), "the prompt's key")
            ("response-key", po::value(&response_key)->default_value("response")->value_name("KEY"),
             "the response's key")
            ("max-bad-lines", po::value(&max_bad_lines)->default_value(0)->value_name("N"),
             "malformed lines skipped before the run fails");
      },
      "token closing each example (default: see below)", "each example goes to /val with probability F");
  po::variables_map vm;
  if (!parse(args, desc,
             "usage: data_prep sft --input FILE.jsonl --output FILE.h5 [--tokenizer PATH] [--prompt-key KEY]\n"
             "                     [--response-key KEY] [--max-bad-lines N] [--eos-id ID] [--val-fraction F]\n"
             "                     [--chunk-tokens N] [--deflate L] [--overwrite]\n\n"
             "Instruction data for fine-tuning: each line's prompt and response, tokenised apart, then an\n"
             "end-of-example token, packed one example after another into /train/tokens and /val/tokens\n"
             "(as `data_prep text` writes them, /doc_offsets the first token of each example) beside\n"
             "/train/loss_mask and /val/loss_mask: uint8, one per token, 1 on the response's tokens and\n"
             "its end-of-example token, 0 on the prompt's. The trainers average the loss over the tokens\n"
             "whose mask is 1. The end-of-example token is --eos-id, else a tokenizer.json's <|endoftext|>\n"
             "when it has one, else none (bytes have no spare id: give --eos-id). A line that is not a JSON\n"
             "object with string values under both keys is malformed: the first few are named by line\n"
             "number, and more than --max-bad-lines of them fail the run (nothing written). Blank lines\n"
             "are skipped.\n",
             vm))
    return 0;
  o.check();
  if (max_bad_lines < 0) throw UsageError("--max-bad-lines must not be negative, got " + std::to_string(max_bad_lines));
  if (prompt_key == response_key) throw UsageError("--prompt-key and --response-key are both '" + prompt_key + "'");

  std::vector<std::string> inputs{input};
  const ChosenTokenizer chosen = o.choose(vm, inputs);
  const std::string& kind = chosen.kind;
  const tessera::text::Tokenizer& tokenizer = *chosen.tokenizer;
  const int64_t vocab = chosen.vocab();
  std::error_code ec;
  if (!fs::is_regular_file(input, ec)) fail("cannot read input ", input, ": no such file");
  std::ifstream lines(input, std::ios::binary);
  if (!lines) fail("cannot read input ", input, ": permission denied or unreadable");

  AtomicOutput out(o.output, o.overwrite, inputs);
  int64_t n_train = 0, n_val = 0, e_train = 0, e_val = 0, masked = 0, bad = 0;
  std::string named;  // the first kNamedBadLines malformed lines
  {
    tessera::io::H5File f = tessera::io::H5File::create(out.tmp());
    tessera::io::TokenWriter train(f, "/train", vocab, o.storage.chunk, o.storage.deflate, true);
    std::optional<tessera::io::TokenWriter> val;
    if (o.val_fraction > 0) val.emplace(f, "/val", vocab, o.storage.chunk, o.storage.deflate, true);
    std::string line;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> mask;
    int64_t line_no = 0, index = 0;
    while (std::getline(lines, line)) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const Example e = parse_example(line, prompt_key, response_key);
      if (!e.problem.empty()) {
        if (++bad <= kNamedBadLines) named += (named.empty() ? "" : "; ") + ("line " + std::to_string(line_no)) + ": " + e.problem;
        continue;
      }
      if (bad > max_bad_lines) continue;  // failing: the rest are only checked, to count them
      tokens.clear();
      mask.clear();
      try {
        for (const std::string* part : {&e.prompt, &e.response}) {
          const std::vector<int32_t> ids = tokenizer.encode(*part);
          tokens.insert(tokens.end(), ids.begin(), ids.end());
          mask.insert(mask.end(), ids.size(), part == &e.response ? 1 : 0);
        }
      } catch (const tessera::Error& err) {
        fail("cannot tokenise input ", input, ":", line_no, ": ", err.what());
      }
      if (o.eos_id >= 0) {
        tokens.push_back(static_cast<int32_t>(o.eos_id));
        mask.push_back(1);
      }
      // Example i goes to /val when Philox (0, "data_prep.val", i) falls below F (as `text` splits).
      const tessera::PhiloxCounter w = tessera::philox_bits(0, tessera::stream_id("data_prep.val"), index++);
      const bool to_val = val && static_cast<double>(w[0]) / 4294967296.0 < o.val_fraction;
      tessera::io::TokenWriter& into = to_val ? *val : train;
      into.start_document();
      into.append(tokens.data(), mask.data(), static_cast<int64_t>(tokens.size()));
      for (const uint8_t m : mask) masked += m;
    }
    if (lines.bad()) fail("cannot read input ", input, ": read error at line ", line_no + 1);
    if (bad > max_bad_lines)
      fail("input ", input, ": ", bad, " malformed line", bad == 1 ? "" : "s", " (", named,
           bad > kNamedBadLines ? "; ..." : "", "), more than --max-bad-lines ", max_bad_lines,
           ": nothing written (each line must be a JSON object with strings under '", prompt_key, "' and '",
           response_key, "')");
    n_train = train.finish();
    e_train = train.documents();
    if (val) {
      n_val = val->finish();
      e_val = val->documents();
    }
    if (n_train < 2) fail("input ", input, " gives ", n_train, " training tokens: too few (at least 2)");
    if (val && n_val == 0) fail("no example went to /val: use more examples, or --val-fraction 0");
    if (masked == 0) fail("input ", input, ": no response token to train on (every response is empty)");
    f.set_attr("/", "vocab_size", vocab);
    if (o.eos_id >= 0) f.set_attr("/", "eos_id", o.eos_id);
    tessera::text::store_tokenizer(f, kind, chosen.bytes, fs::path(o.tokenizer_path).filename().string());
    f.set_attr("/", "source", fs::path(input).filename().string());
    f.flush();
  }
  out.commit();
  if (bad > 0) std::cerr << "warning: skipped " << bad << " malformed line" << (bad == 1 ? "" : "s") << " (" << named
                         << (bad > kNamedBadLines ? "; ..." : "") << ")\n";
  std::cout << "wrote " << o.output << ": " << n_train << " train and " << n_val << " val tokens (" << e_train
            << " and " << e_val << " examples; " << masked << " response tokens in the loss) ("
            << (o.tokenizer_path.empty() ? kind : kind + " " + o.tokenizer_path) << ", vocab " << vocab << ")\n";
  return 0;
}

}  // namespace data_prep

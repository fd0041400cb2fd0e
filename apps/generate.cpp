// generate: text from a trained checkpoint (gpt2 or llama), on one process or over --dp x --tp x
// --pp ranks (replicas serving a share of the prompts each, heads split, pipeline stages:
// infer/replicas.h, infer::HeadSplit, StageSplit): prompts from --prompt, --prompts FILE.jsonl or
// standard input (--interactive), decoded with a KV cache per slot and continuous batching,
// completions to --output FILE.jsonl (or streamed); or --score DATA.h5, the model's perplexity over
// a token data set's evaluation windows (gpt_train's eval_loss).
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <deque>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/common/cli.h"
#include "apps/common/train_cli.h"
#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "comm/process_mesh.h"
#include "core/error.h"
#include "infer/completion_writer.h"
#include "infer/decoder.h"
#include "infer/generator.h"
#include "infer/model_spec.h"
#include "infer/prompt_file.h"
#include "infer/replicas.h"
#include "infer/scorer.h"
#include "io/checkpoint_file.h"
#include "io/hdf5_file.h"
#include "io/token_dataset.h"
#include "quant/quantized_checkpoint.h"
#include "text/stored_tokenizer.h"

namespace po = boost::program_options;
using namespace tessera;

namespace {

// Rank 0 speaks for the job: every rank of a replica computes the same tokens (infer::HeadSplit),
// and the other replicas relay their completions to it (infer::CompletionRelay).
bool g_speaks = true;

// Reports go to standard error: standard output carries completions only.
template <typename... Args>
void report(const Args&... args) {
  if (g_speaks) std::cerr << "generate: " << detail::concat(args...) << "\n";
}

// The checkpoint's stored tokenizer; bytes when it records none (today's byte-level data).
std::unique_ptr<text::Tokenizer> tokenizer_of(const std::string& checkpoint, bool& stored) {
  const io::H5File f = io::H5File::open_read(checkpoint);
  stored = f.has_attr("/", "tokenizer");
  if (stored) return text::load_stored_tokenizer(f);
  return text::make_tokenizer("bytes", "", checkpoint);
}

struct Options {
  std::string checkpoint, prompt, prompts, output, score, split, weights, activations;
  bool interactive = false, logprobs = false;
  int64_t max_batch = 8, max_len = 0, seq_len = 0, global_batch = 8, eval_batches = 0, dp = 0, tp = 1, pp = 1;
  infer::ModelOverrides model;
  infer::SamplingOptions sampling;
  infer::StopRules stop;
};

int run_score(const Options& o, infer::Decoder& decoder, comm::ProcessMesh& mesh) {
  const io::TokenDataset data = io::TokenDataset::open(o.score, o.split);
  infer::ScoreOptions so;
  so.seq_len = o.seq_len > 0 ? o.seq_len : decoder.config().llama() ? 0 : decoder.config().max_seq;
  TESSERA_CHECK(so.seq_len > 0, "--score with a llama checkpoint needs --seq-len (the window the model was ",
                "evaluated on: gpt_train's --seq-len)");
  so.global_batch = o.global_batch;
  so.eval_batches = o.eval_batches;
  so.slots = o.max_batch;
  if (mesh.shape().dp > 1) so.replicas = &mesh.group(comm::Axis::dp);
  const infer::Score s = infer::score_windows(decoder, data, so);
  if (!g_speaks) return 0;
  std::cout << "score: " << o.score << " (" << data.dataset << "), " << s.windows << " windows of " << so.seq_len
            << " tokens in " << s.batches << " batches of " << so.global_batch;
  if (mesh.shape().dp > 1) std::cout << ", shared by " << mesh.shape().dp << " replicas";
  std::cout << "\n";
  std::printf("loss %.9g nats/token, perplexity %.6g", s.mean_loss, std::exp(s.mean_loss));
  if (data.tokenizer == "bytes")  // a token is a byte
    std::printf(", %.6g bits per byte", s.mean_loss / std::log(2.0));
  std::printf("\n");
  return 0;
}

// Streams a completion's new text to standard output as it grows (a terminal).
class Streamer {
 public:
  void operator()(const infer::Completion& c, const infer::Detokenize& detokenize) {
    const std::string text = c.finish_reason.empty() ? detokenize(c.ids) : c.text;
    if (text.size() > shown_ && text.compare(0, shown_, printed_) == 0) {
      std::cout << text.substr(shown_) << std::flush;
      printed_ = text;
      shown_ = text.size();
    }
  }
  void reset() { shown_ = 0, printed_.clear(); }

 private:
  size_t shown_ = 0;
  std::string printed_;
};

int run_generate(const Options& o, infer::Decoder& decoder, const text::Tokenizer& tokenizer, comm::ProcessMesh& mesh) {
  const int64_t max_len = o.max_len > 0 ? o.max_len : std::min<int64_t>(decoder.config().max_seq, 2048);
  TESSERA_CHECK(max_len <= decoder.position_limit(), "--max-len ", max_len, " is longer than the ",
                decoder.position_limit(), " positions the model learned");
  const int64_t slots = o.interactive || !o.prompt.empty() ? 1 : o.max_batch;
  report("kv cache: ", infer::KvCache::bytes_for(decoder.local_layers(), slots, max_len, decoder.local_kv_heads(),
                                                  decoder.head_dim()),
         " bytes per rank (", slots, " slots x ", max_len, " positions x ", decoder.local_layers(), " layers x ",
         decoder.local_kv_heads(), " kv heads x ", decoder.head_dim(), " x 2 x 4 bytes)");
  infer::KvCache cache = decoder.make_cache(slots, max_len);
  const infer::Detokenize detokenize = [&](const std::vector<int32_t>& ids) {
    std::vector<int32_t> valid;  // a tokenizer smaller than the model's vocabulary: ids past it shown as nothing
    for (const int32_t id : ids)
      if (id < tokenizer.vocab_size()) valid.push_back(id);
    return tokenizer.decode(valid);
  };
  infer::StopRules stop = o.stop;
  infer::Generator generator(decoder, cache, o.sampling, stop, detokenize, o.logprobs);

  const bool terminal = g_speaks && isatty(STDOUT_FILENO) != 0;
  if (o.interactive) {
    if (isatty(STDIN_FILENO)) std::cerr << "> " << std::flush;
    uint64_t index = 0;
    for (std::string line; std::getline(std::cin, line); ++index) {
      infer::Request r{index, tokenizer.encode(line)};
      generator.check(r);
      Streamer stream;
      generator.run({r}, [&](const infer::Completion& c) { if (terminal) stream(c, detokenize); },
                    [&](infer::Completion&& c) {
                      if (terminal) stream(c, detokenize);
                      else std::cout << c.text;
                      std::cout << "\n" << std::flush;
                    });
      if (isatty(STDIN_FILENO)) std::cerr << "> " << std::flush;
    }
    return 0;
  }

  // Every prompt tokenised and checked on every rank before any work.
  std::vector<std::string> shown;
  std::deque<infer::Request> queue;
  if (!o.prompt.empty()) {
    queue.push_back({0, tokenizer.encode(o.prompt)});
    shown.push_back(o.prompt);
  } else {
    for (const infer::PromptLine& p : infer::read_prompt_file(o.prompts)) {
      infer::Request r{queue.size(), p.has_ids ? p.ids : tokenizer.encode(p.text)};
      try {
        generator.check(r);
      } catch (const Error& e) {
        fail(o.prompts, " line ", p.line, ": ", e.what());
      }
      shown.push_back(p.has_ids ? detokenize(p.ids) : p.text);
      queue.push_back(std::move(r));
    }
  }
  for (const infer::Request& r : queue) generator.check(r);
  // Under --dp this replica keeps its share (infer::replica_of_prompt); its first rank (tp 0, pp 0)
  // relays each finished completion's line to rank 0, the writer.
  const int replicas = mesh.shape().dp, replica = mesh.coord(comm::Axis::dp);
  const int64_t prompts = static_cast<int64_t>(queue.size());
  std::erase_if(queue, [&](const infer::Request& r) { return infer::replica_of_prompt(r.index, replicas) != replica; });
  const bool replica_lead = mesh.coord(comm::Axis::tp) == 0 && mesh.coord(comm::Axis::pp) == 0;
  std::vector<int64_t> expected;
  for (int r = 0; r < replicas; ++r) expected.push_back(infer::prompts_of_replica(prompts, r, replicas));
  infer::CompletionRelay relay(replica_lead ? &mesh.group(comm::Axis::dp) : nullptr, expected);

  const bool stream = !o.prompt.empty() && o.output.empty() && terminal;
  std::unique_ptr<infer::CompletionWriter> writer;
  const bool lines = !o.output.empty() || o.prompt.empty();  // JSON lines, else the text (--prompt)
  if (g_speaks && lines)
    writer = std::make_unique<infer::CompletionWriter>(o.output.empty() ? "-" : o.output, o.logprobs);
  const infer::CompletionRelay::Take take = [&](uint64_t index, std::string&& line) {
    writer->add_line(index, std::move(line));
  };
  Streamer streamer;
  generator.run(std::move(queue),
                [&](const infer::Completion& c) { if (stream) streamer(c, detokenize); },
                [&](infer::Completion&& c) {
                  if (writer) writer->add(c, shown[c.index]);
                  else if (replica_lead && replica > 0 && lines)
                    relay.send(c.index, infer::CompletionWriter::line(c, shown[c.index], o.logprobs));
                  else if (stream) streamer(c, detokenize), std::cout << "\n" << std::flush;
                  else if (g_speaks) std::cout << c.text << "\n" << std::flush;
                },
                [&] { relay.progress(take); });
  relay.finish(take);
  if (writer) writer->close();
  // The job's figures: tokens summed over the replicas, time the slowest replica's.
  infer::GenerationStats s = generator.stats();
  if (replicas > 1) {
    comm::Communicator& dp = mesh.group(comm::Axis::dp);
    double sums[4] = {static_cast<double>(s.generated_tokens), static_cast<double>(s.prompt_tokens),
                      static_cast<double>(s.steps), static_cast<double>(s.decode_tokens)};
    dp.all_reduce_sum(std::span<double>(sums, 4));
    double longest[2] = {s.seconds, s.decode_seconds};
    dp.all_reduce_max(std::span<double>(longest, 2));
    s.generated_tokens = static_cast<int64_t>(sums[0]), s.prompt_tokens = static_cast<int64_t>(sums[1]);
    s.steps = static_cast<int64_t>(sums[2]), s.decode_tokens = static_cast<int64_t>(sums[3]);
    s.seconds = longest[0], s.decode_seconds = longest[1];
  }
  const std::string over = replicas > 1 ? " over " + std::to_string(replicas) + " replicas" : "";
  report(s.generated_tokens, " tokens generated for ", shown.size(), " prompt(s) (", s.prompt_tokens,
         " prompt tokens) in ", s.steps, " steps", over, ", ", s.seconds, " s: ",
         s.seconds > 0 ? static_cast<double>(s.generated_tokens) / s.seconds : 0.0, " tokens/s",
         o.output.empty() ? "" : "; written to " + o.output);
  if (s.decode_tokens > 0)
    report("decode: ", s.decode_tokens, " tokens in the steps without a prefill", over, ", ", s.decode_seconds,
           replicas > 1 ? " s (the slowest replica's): " : " s: ",
           s.decode_seconds > 0 ? static_cast<double>(s.decode_tokens) / s.decode_seconds : 0.0, " tokens/s");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiRuntime mpi(&argc, &argv);
  g_speaks = mpi.world_rank() == 0;
  const int code = cli::run_main([&] {
    Options o;
    std::vector<std::string> stop_strings;
    std::vector<int32_t> stop_tokens;
    cli::OptionSections opts;
    opts.section(cli::kModel).add_options()
        ("checkpoint", po::value(&o.checkpoint)->required()->value_name("FILE.h5"), "a tessera checkpoint of a gpt2 or llama model (gpt_train, ckpt_tool import-hf)")
        ("norm-eps", po::value(&o.model.norm_eps)->default_value(0.0f, "0")->value_name("X"), "llama: the RMSNorm epsilon the model was trained with (0: the checkpoint's hf.norm_eps, else 1e-5)")
        ("rope-theta", po::value(&o.model.rope_theta)->default_value(0.0f, "0")->value_name("X"), "llama: the rotary base (0: the checkpoint's hf.rope_theta, else 10000)")
        ("weights", po::value(&o.weights)->default_value("f32")->value_name("f32|bf16"), "bf16: round the checkpoint's f32 matrices (blocks and head) to bf16 at load and multiply them with bf16 activations, f32 sums (half the bytes read per token; kernels/cpu/bf16_matmul_paths.h)")
        ("activations", po::value(&o.activations)->default_value("f32")->value_name("f32|int8"), "int8 (a quantised checkpoint only): the quantised matrices' products quantise the activations to int8 per row and weight group and sum integer products on the matrices packed once at load (AVX-512 VNNI where the CPU has it; kernels/cpu/quant_w8a8_packed.h)");
    opts.section(cli::kData).add_options()
        ("prompt", po::value(&o.prompt)->value_name("TEXT"), "one prompt (its completion streams to a terminal)")
        ("prompts", po::value(&o.prompts)->value_name("FILE.jsonl"), "prompts, one JSON object per line: {\"text\": \"...\"} or {\"ids\": [1, 2]}")
        ("interactive", po::bool_switch(&o.interactive), "read prompts from standard input, one per line, and answer each")
        ("score", po::value(&o.score)->value_name("DATA.h5"), "report the loss, perplexity (and bits per byte for byte data) over this token data set's evaluation windows instead of generating")
        ("split", po::value(&o.split)->default_value("val")->value_name("val|train"), "--score: the split (/val/tokens, else /tokens)")
        ("seq-len", po::value(&o.seq_len)->default_value(0)->value_name("N"), "--score: tokens per window (0: gpt2's learned positions; llama needs it)")
        ("global-batch", po::value(&o.global_batch)->default_value(8)->value_name("N"), "--score: windows per evaluation batch, as gpt_train's --global-batch")
        ("eval-batches", po::value(&o.eval_batches)->default_value(0)->value_name("N"), "--score: evaluation batches, as gpt_train's --eval-batches (0: every window once)");
    opts.section("Decoding").add_options()
        ("max-new-tokens", po::value(&o.stop.max_new_tokens)->default_value(64)->value_name("N"), "tokens to generate per prompt at most")
        ("temperature", po::value(&o.sampling.temperature)->default_value(0.0f, "0")->value_name("T"), "sampling temperature (0: greedy)")
        ("top-k", po::value(&o.sampling.top_k)->default_value(0)->value_name("K"), "sample among the K most likely tokens (0: all)")
        ("top-p", po::value(&o.sampling.top_p)->default_value(1.0f, "1")->value_name("P"), "sample among the fewest most likely tokens whose probability reaches P, in (0, 1]")
        ("repetition-penalty", po::value(&o.sampling.repetition_penalty)->default_value(1.0f, "1")->value_name("X"), "divide the logits of tokens already seen by X (CTRL; 1: none)")
        ("stop", po::value(&stop_strings)->multitoken()->value_name("TEXT..."), "end a completion where its text contains one of these strings (cut before it)")
        ("stop-token", po::value(&stop_tokens)->multitoken()->value_name("ID..."), "end a completion at one of these token ids (left out of its text)")
        ("seed", po::value(&o.sampling.seed)->default_value(1234)->value_name("N"), "sampling seed: a prompt's text depends only on it, the prompt's index and the options");
    opts.section(cli::kLayout).add_options()
        ("dp", po::value(&o.dp)->default_value(0)->value_name("N"), "replicas of the model (each --tp x --pp ranks), prompt i decoded by replica i % N and --score's windows split over them; the output is the one-rank output (world = dp x tp x pp; 0: world / (tp x pp))")
        ("tp", po::value(&o.tp)->default_value(1)->value_name("N"), "tensor parallelism over the heads: N ranks (mpirun -np N) each hold 1/N of the heads, their KV cache and MLP features")
        ("pp", po::value(&o.pp)->default_value(1)->value_name("N"), "pipeline stages: N ranks each hold a share of the blocks and their KV cache; a step's sequences flow through them as N micro-batches");
    opts.section("Batching").add_options()
        ("max-batch", po::value(&o.max_batch)->default_value(8)->value_name("N"), "sequences decoded at once (KV cache slots; --score: windows per forward)")
        ("max-len", po::value(&o.max_len)->default_value(0)->value_name("N"), "positions per slot, prompt and completion (0: gpt2's learned positions, llama's up to 2048)");
    opts.section("Output").add_options()
        ("output", po::value(&o.output)->value_name("FILE.jsonl"), "completions as JSON lines {index, prompt, completion, completion_ids, finish_reason}; never written over (default: standard output)")
        ("logprobs", po::bool_switch(&o.logprobs), "add each completion token's log-probability under the model");
    po::variables_map vm;
    const cli::HelpText help{
        "generate",
        "usage: generate --checkpoint FILE.h5 (--prompt TEXT | --prompts FILE.jsonl | --interactive | --score DATA.h5) [options]\n\n"
        "Generates text from a trained gpt2 or llama checkpoint with a KV cache and continuous batching,\n"
        "or scores a token data set (perplexity, as gpt_train's eval_loss).",
        "  generate --checkpoint runs/tour/step_80.h5 --prompt 'To be' --max-new-tokens 40\n"
        "  generate --checkpoint runs/tour/step_80.h5 --prompts prompts.jsonl --temperature 0.8 --top-p 0.9 --output out.jsonl\n"
        "  generate --checkpoint runs/tour/step_80.h5 --score data.h5 --seq-len 64"};
    if (!cli::parse(argc, argv, opts, vm, help)) return 0;
    const int sources = !o.prompt.empty() + !o.prompts.empty() + o.interactive + !o.score.empty();
    if (sources != 1)
      throw po::error("give exactly one of --prompt, --prompts, --interactive and --score (got " +
                      std::to_string(sources) + ")");
    if (vm.count("prompt") && o.prompt.empty()) throw po::error("--prompt is empty");
    o.stop.stop_strings = stop_strings;
    o.stop.stop_tokens = stop_tokens;
    for (const std::string& s : stop_strings)
      if (s.empty()) throw po::error("--stop: an empty string would stop every completion at once");
    o.sampling.validate();
    TESSERA_CHECK(o.max_batch >= 1, "--max-batch must be >= 1, got ", o.max_batch);
    TESSERA_CHECK(o.max_len >= 0, "--max-len must be >= 0 (0: the model's), got ", o.max_len);
    TESSERA_CHECK(o.stop.max_new_tokens >= 1, "--max-new-tokens must be >= 1, got ", o.stop.max_new_tokens);
    const infer::WeightPrecision weights = infer::parse_weight_precision(o.weights);
    const infer::ActivationPrecision activations = infer::parse_activation_precision(o.activations);
    TESSERA_CHECK(activations == infer::ActivationPrecision::f32 || weights == infer::WeightPrecision::f32,
                  "--activations int8 and --weights bf16 exclude each other (bf16 products take f32 activations)");
    cli::check_output_files({{"--checkpoint", o.checkpoint}, {"--prompts", o.prompts}, {"--score", o.score}},
                            {{"--output", o.output}});
    if (!o.output.empty() && o.output != "-") {  // refused before the model is read
      std::error_code ec;
      TESSERA_CHECK(!std::filesystem::is_regular_file(o.output, ec), "--output ", o.output,
                    " already exists: nothing is overwritten (move it away or give another file)");
    }
    if (!o.prompts.empty()) infer::read_prompt_file(o.prompts);  // a bad file stops before the model loads

    const int64_t world = mpi.world_size();
    TESSERA_CHECK(o.dp >= 0 && o.tp >= 1 && o.pp >= 1, "--dp ", o.dp, ", --tp ", o.tp, " and --pp ", o.pp,
                  " must be positive (--dp 0: world / (tp x pp))");
    TESSERA_CHECK(o.dp > 0 || world % (o.tp * o.pp) == 0, "--tp ", o.tp, " x --pp ", o.pp, " = ", o.tp * o.pp,
                  " does not divide the ", world, " rank(s) of the job, so --dp cannot be inferred");
    const int64_t dp = o.dp > 0 ? o.dp : world / (o.tp * o.pp);
    TESSERA_CHECK(dp * o.tp * o.pp == world, "--dp ", dp, " x --tp ", o.tp, " x --pp ", o.pp, " = ",
                  dp * o.tp * o.pp, " ranks, but the job has ", world, " (mpirun -np ", dp * o.tp * o.pp, ")");
    TESSERA_CHECK(!o.interactive || world == 1, "--interactive reads standard input on one rank: run it on one ",
                  "rank (without --dp, --tp or --pp; this job has ", world, ")");
    comm::MeshShape shape;  // pp, dp, tp outermost to innermost, as the trainers' (comm/process_mesh.h)
    shape.pp = static_cast<int>(o.pp);
    shape.dp = static_cast<int>(dp);
    shape.tp = static_cast<int>(o.tp);
    comm::ProcessMesh mesh(shape.resolved(mpi.world_size()));
    infer::HeadSplit split;
    if (o.tp > 1) split.group = &mesh.group(comm::Axis::tp);
    infer::StageSplit stages;
    if (o.pp > 1) stages.group = &mesh.group(comm::Axis::pp);
    const io::CheckpointReader reader(o.checkpoint, MPI_COMM_NULL);
    const models::GptConfig config = infer::model_config_of(reader, o.model);
    TESSERA_CHECK(activations == infer::ActivationPrecision::f32 || quant::is_quantized(reader),
                  "--activations int8: checkpoint ", o.checkpoint,
                  " holds f32 weights; int8 activations need a quantised checkpoint (ckpt_tool quantize --bits 8|4)");
    bool stored = false;
    const std::unique_ptr<text::Tokenizer> tokenizer = tokenizer_of(o.checkpoint, stored);
    for (const int32_t id : o.stop.stop_tokens)
      TESSERA_CHECK(id >= 0 && id < config.vocab, "--stop-token ", id, " is outside the model's vocabulary [0, ",
                    config.vocab, ")");
    infer::Decoder decoder(reader, config, split, stages, weights, activations);
    report(o.checkpoint, ": ", models::arch_name(config.arch), ", ", config.layers, " layers, hidden ", config.hidden,
           ", ", config.heads, " heads", o.tp > 1 ? " (" + std::to_string(decoder.local_heads()) + " per rank)" : "",
         config.llama() ? " (" + std::to_string(config.kv()) + " kv)" : "",
           config.moe_every > 0 ? ", " + std::to_string(config.moe.experts) + " experts (top-" +
                                      std::to_string(config.moe.router.top_k) + ", " +
                                      std::to_string(config.moe.shared_experts) + " shared, no token dropped) every " +
                                      std::to_string(config.moe_every) + " blocks"
                                : std::string(),
           ", vocab ",
           config.vocab, ", ", decoder.parameter_bytes(), " bytes of weights",
           weights == infer::WeightPrecision::bf16 ? " (--weights bf16: bf16 products)" : "",
           activations == infer::ActivationPrecision::int8 ? " (--activations int8: int8 activations, integer products)" : "",
           quant::is_quantized(reader) ? " (" + quant::quantization_text(reader) + ")" : std::string(), "; tokenizer ",
           tokenizer->kind(),
           stored ? "" : " (none stored: bytes)");
    if (dp > 1)
      report(dp, " replicas of ", o.tp * o.pp, " rank(s) each",
             o.score.empty() ? ": prompt i decoded by replica i % " + std::to_string(dp) : ": the windows split over them");
    if (!o.score.empty()) return run_score(o, decoder, mesh);
    return run_generate(o, decoder, *tokenizer, mesh);
  });
  if (code != 0 && mpi.world_size() > 1) comm::abort_job(code);
  return code;
}

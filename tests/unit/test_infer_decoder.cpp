// lib/infer on checkpoints written here with random weights: the KV-cache path (a prefill, a
// chunk after it, then one token per step, several slots in one call) gives the logits of a full
// recompute of the sequence within relative 1e-5 at every position, for gpt2 and Llama with
// grouped-query and multi-query attention; the sampler's draws depend only on (seed, prompt,
// position); bad tokens, lengths and models are refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/philox.h"
#include "infer/decoder.h"
#include "infer/generator.h"
#include "infer/model_spec.h"
#include "infer/sampler.h"
#include "io/checkpoint_file.h"
#include "quant/quantized_checkpoint.h"
#include "quant/quantized_matrix.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

fs::path scratch_dir() { return fs::temp_directory_path() / ("tessera_infer_" + std::to_string(getpid())); }

// The checkpoints written here are removed after the last test.
class RemoveScratch : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(scratch_dir(), ec);
  }
};
::testing::Environment* const kRemoveScratch = ::testing::AddGlobalTestEnvironment(new RemoveScratch);

// A checkpoint of `config` with random weights (norm weights near 1), as gpt_train records it;
// `edit` may change a tensor's values before they are written.
using EditTensor = std::function<void(const std::string& param, std::vector<float>& values)>;
std::string write_checkpoint(const models::GptConfig& c, const std::string& name, const EditTensor& edit = nullptr) {
  const fs::path dir = scratch_dir();
  fs::create_directories(dir);
  const std::string path = (dir / name).string();
  io::CheckpointWriter w(path, MPI_COMM_NULL);
  uint64_t stream = 1;
  for (const auto& [param, shape] : infer::parameter_shapes(c)) {
    const std::string t = "/params/" + param;
    std::vector<float> v(static_cast<size_t>(shape.numel()));
    const bool norm = param.find("ln") != std::string::npos && param.ends_with(".weight");
    philox_fill_normal(v.data(), shape.numel(), 7, stream++, 0, norm ? 1.0f : 0.0f, norm ? 0.1f : 0.3f);
    if (edit) edit(param, v);
    w.create(t, shape);
    w.write_range(t, 0, shape.numel(), v.data());
  }
  w.set_attr("model", c.llama() ? "llama" : "gpt");
  w.set_attr("model.layers", c.layers);
  w.set_attr("model.hidden", c.hidden);
  w.set_attr("model.heads", c.heads);
  w.set_attr("model.vocab", c.vocab);
  if (c.llama()) {
    w.set_attr("model.kv_heads", c.kv());
    w.set_attr("model.ffn_hidden", c.mlp_hidden());
    w.set_attr("model.tie_embeddings", static_cast<int64_t>(c.tie_embeddings));
  } else {
    w.set_attr("model.max_seq", c.max_seq);
  }
  w.commit();
  return path;
}

models::GptConfig gpt2_config() {
  models::GptConfig c;
  c.vocab = 50;
  c.max_seq = 40;
  c.layers = 2;
  c.hidden = 32;
  c.heads = 4;
  return c;
}

models::GptConfig llama_config(int64_t kv_heads, bool tied) {
  models::GptConfig c;
  c.arch = models::Arch::llama;
  c.vocab = 61;
  c.max_seq = 2048;
  c.layers = 2;
  c.hidden = 32;
  c.heads = 4;
  c.kv_heads = kv_heads;
  c.ffn_hidden = 48;
  c.tie_embeddings = tied;
  return c;
}

std::vector<int32_t> sequence(int64_t length, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> s(static_cast<size_t>(length));
  for (int64_t i = 0; i < length; ++i)
    s[static_cast<size_t>(i)] = static_cast<int32_t>(philox_uniform(seed, 3, static_cast<uint64_t>(i)) * vocab);
  return s;
}

// Rows of logits within relative `tol` of the reference rows (relative to each row's largest).
void expect_rows_near(const float* got, const float* want, int64_t rows, int64_t vocab, double tol,
                      const std::string& what) {
  for (int64_t r = 0; r < rows; ++r) {
    double scale = 0, worst = 0;
    for (int64_t v = 0; v < vocab; ++v) scale = std::max(scale, std::fabs(static_cast<double>(want[r * vocab + v])));
    for (int64_t v = 0; v < vocab; ++v)
      worst = std::max(worst, std::fabs(static_cast<double>(got[r * vocab + v]) - want[r * vocab + v]));
    EXPECT_LE(worst, tol * std::max(scale, 1e-3)) << what << ", row " << r;
  }
}

// The logits of every position of `tokens`: a full recompute (one prefill), and the cache path: a
// prefill of `prefill` tokens, a chunk of 3 after it, then one token per step, with another
// sequence decoding in a second slot in the same calls.
void check_cache_matches_recompute(const models::GptConfig& config, const std::string& name) {
  const std::string path = write_checkpoint(config, name);
  const io::CheckpointReader reader(path, MPI_COMM_NULL);
  infer::Decoder decoder(reader, infer::model_config_of(reader));
  const int64_t L = 30, V = config.vocab, prefill = 5;
  const std::vector<int32_t> tokens = sequence(L, V, 11), other = sequence(L, V, 12);

  infer::KvCache full_cache = decoder.make_cache(1, L);
  const Tensor full = decoder.forward({{0, tokens.data(), L, true}}, full_cache).clone();
  ASSERT_EQ(full.numel(), L * V);
  EXPECT_EQ(full_cache.length(0), L);

  infer::KvCache cache = decoder.make_cache(3, L);
  // The other sequence fills slot 2 first, so slot 1's calls share their GEMMs with it.
  decoder.forward({{2, other.data(), 4, false}}, cache);
  int64_t at = 0;
  Tensor got = decoder.forward({{1, tokens.data(), prefill, true}, {2, other.data() + 4, 1, false}}, cache);
  expect_rows_near(got.data<float>(), full.data<float>(), prefill, V, 1e-5, name + " prefill");
  at = prefill;
  got = decoder.forward({{2, other.data() + 5, 1, false}, {1, tokens.data() + at, 3, true}}, cache);
  expect_rows_near(got.data<float>() + V, full.data<float>() + at * V, 3, V, 1e-5, name + " chunk after a prefill");
  at += 3;
  for (int64_t k = 6; at < L; ++at, ++k) {
    std::vector<infer::SlotTokens> chunks{{1, tokens.data() + at, 1, false}};
    if (k < L) chunks.push_back({2, other.data() + k, 1, false});
    got = decoder.forward(chunks, cache);
    expect_rows_near(got.data<float>(), full.data<float>() + at * V, 1, V, 1e-5,
                     name + " decode at position " + std::to_string(at));
  }
  EXPECT_EQ(cache.length(1), L);
}

}  // namespace

TEST(InferDecoder, CacheMatchesRecomputeGpt2) { check_cache_matches_recompute(gpt2_config(), "gpt2.h5"); }
TEST(InferDecoder, CacheMatchesRecomputeLlamaGroupedQuery) {
  check_cache_matches_recompute(llama_config(2, false), "llama_gqa.h5");
}
TEST(InferDecoder, CacheMatchesRecomputeLlamaMultiQueryTied) {
  check_cache_matches_recompute(llama_config(1, true), "llama_mqa.h5");
}

// A quantised checkpoint (ckpt_tool quantize) runs its block matrices, and here the head, on the
// int8/int4 kernels: its logits equal those of an f32 checkpoint holding the dequantised weights,
// within f32 rounding (1e-5), in a prefill (GEMM) and one token per step (GEMV); and they are
// not the unquantised model's (the quantised weights are the ones used).
// (A tied table quantised for the head stays f32 for the embedding, which one f32 checkpoint cannot
// say: the tied case quantises the blocks only.)
void check_quantized_matches_dequantized(const models::GptConfig& config, int bits, int64_t group,
                                         const std::string& name) {
  const std::string f32 = write_checkpoint(config, name + ".h5");
  const std::string quantized = (scratch_dir() / (name + ".q.h5")).string();
  quant::QuantizeOptions options;
  options.bits = bits;
  options.group_size = group;
  options.head = !config.tie_embeddings;
  quant::quantize_checkpoint(f32, quantized, options);
  const io::CheckpointReader q_reader(quantized, MPI_COMM_NULL);
  int64_t replaced = 0;
  const std::string dequantized = write_checkpoint(config, name + ".dq.h5", [&](const std::string& param,
                                                                                std::vector<float>& v) {
    if (!q_reader.has(quant::quantized_path(param, "q"))) return;
    quant::QuantizedMatrix::load(q_reader, param).dequantize(v.data());
    ++replaced;
  });
  EXPECT_EQ(replaced, config.layers * (config.llama() ? 7 : 4) + (options.head ? 1 : 0))
      << "the block matrices (and an untied head) quantised, nothing else";

  const int64_t L = 20, V = config.vocab;
  const std::vector<int32_t> tokens = sequence(L, V, 21);
  const io::CheckpointReader dq_reader(dequantized, MPI_COMM_NULL);
  infer::Decoder reference(dq_reader, infer::model_config_of(dq_reader));
  infer::KvCache ref_cache = reference.make_cache(1, L);
  const Tensor want = reference.forward({{0, tokens.data(), L, true}}, ref_cache).clone();

  infer::Decoder decoder(q_reader, infer::model_config_of(q_reader));
  EXPECT_LT(decoder.parameter_bytes(), reference.parameter_bytes());
  infer::KvCache cache = decoder.make_cache(1, L);
  const int64_t prefill = 8;
  Tensor got = decoder.forward({{0, tokens.data(), prefill, true}}, cache);
  expect_rows_near(got.data<float>(), want.data<float>(), prefill, V, 1e-5, name + " prefill (GEMM)");
  for (int64_t at = prefill; at < L; ++at) {
    got = decoder.forward({{0, tokens.data() + at, 1, false}}, cache);
    expect_rows_near(got.data<float>(), want.data<float>() + at * V, 1, V, 1e-5,
                     name + " decode (GEMV) at position " + std::to_string(at));
  }

  const io::CheckpointReader f32_reader(f32, MPI_COMM_NULL);
  infer::Decoder unquantized(f32_reader, infer::model_config_of(f32_reader));
  infer::KvCache f32_cache = unquantized.make_cache(1, L);
  const Tensor plain = unquantized.forward({{0, tokens.data(), L, true}}, f32_cache);
  double moved = 0;
  for (int64_t i = 0; i < L * V; ++i)
    moved = std::max(moved, std::fabs(static_cast<double>(plain.data<float>()[i]) - want.data<float>()[i]));
  EXPECT_GT(moved, 1e-4) << name << ": quantising changed no logit: the f32 weights were used";
}

TEST(InferDecoder, QuantizedInt4Gpt2EqualsItsDequantizedWeights) {
  check_quantized_matches_dequantized(gpt2_config(), 4, 8, "gpt2_int4");
}
TEST(InferDecoder, QuantizedInt8LlamaEqualsItsDequantizedWeights) {
  check_quantized_matches_dequantized(llama_config(2, false), 8, 16, "llama_int8");
}

TEST(InferDecoder, RefusesTokensPositionsAndSlotsByName) {
  const std::string path = write_checkpoint(gpt2_config(), "refuse.h5");
  const io::CheckpointReader reader(path, MPI_COMM_NULL);
  infer::Decoder decoder(reader, infer::model_config_of(reader));
  infer::KvCache cache = decoder.make_cache(1, 8);
  const std::vector<int32_t> bad{1, 50};
  try {
    decoder.forward({{0, bad.data(), 2, false}}, cache);
    FAIL() << "token 50 of a 50-token vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 50 is outside the model's vocabulary [0, 50)"), std::string::npos)
        << e.what();
  }
  const std::vector<int32_t> long_prompt(9, 1);
  EXPECT_THROW(decoder.forward({{0, long_prompt.data(), 9, false}}, cache), Error);
  EXPECT_EQ(cache.length(0), 0);
  infer::KvCache big = decoder.make_cache(1, 64);
  const std::vector<int32_t> past(41, 1);
  try {
    decoder.forward({{0, past.data(), 41, false}}, big);
    FAIL() << "41 positions of a model with 40 learned ones were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("learned positions"), std::string::npos) << e.what();
  }
}

TEST(InferSampler, DrawsDependOnlyOnSeedPromptAndPosition) {
  const int64_t V = 40;
  std::vector<float> logits(V);
  for (int64_t i = 0; i < V; ++i) logits[static_cast<size_t>(i)] = std::sin(0.7f * static_cast<float>(i));
  infer::SamplingOptions o;
  o.temperature = 1.0f;
  o.top_p = 0.95f;
  o.seed = 5;
  auto draw = [&](uint64_t prompt, int64_t position) {
    std::vector<float> copy = logits;
    return infer::choose_token(copy.data(), V, {}, o, prompt, position);
  };
  std::vector<int32_t> first, again, other_seed;
  for (int64_t p = 0; p < 64; ++p) first.push_back(draw(3, p));
  for (int64_t p = 0; p < 64; ++p) again.push_back(draw(3, p));
  EXPECT_EQ(first, again);
  o.seed = 6;
  for (int64_t p = 0; p < 64; ++p) other_seed.push_back(draw(3, p));
  EXPECT_NE(first, other_seed);
  // Greedy takes the largest logit; top-k 1 does too whatever the temperature.
  o.temperature = 0;
  const int32_t best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  EXPECT_EQ(draw(0, 0), best);
  o.temperature = 2;
  o.top_k = 1;
  EXPECT_EQ(draw(0, 1), best);
  // A repeated token's positive logit is divided by the penalty.
  o.temperature = 0;
  o.top_k = 0;
  o.repetition_penalty = 1e6f;
  std::vector<float> copy = logits;
  EXPECT_NE(infer::choose_token(copy.data(), V, {best}, o, 0, 0), best);
}

TEST(InferSampler, TopPOutsideZeroOneIsRefused) {
  for (const float p : {0.0f, -0.5f, 1.5f}) {
    infer::SamplingOptions o;
    o.top_p = p;
    try {
      o.validate();
      FAIL() << "--top-p " << p << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--top-p must be in (0, 1]"), std::string::npos) << e.what();
    }
  }
}

// Stop tokens and strings end a completion ("stop"), the token left out of the text, the text cut
// before the string; otherwise --max-new-tokens ends it ("length").
TEST(InferGenerator, StopTokensAndStringsEndACompletion) {
  const std::string path = write_checkpoint(gpt2_config(), "stops.h5");
  const io::CheckpointReader reader(path, MPI_COMM_NULL);
  infer::Decoder decoder(reader, infer::model_config_of(reader));
  infer::KvCache cache = decoder.make_cache(2, 40);
  // Each id as a letter (a..z, then A..X), so that strings can be cut.
  const infer::Detokenize letters = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (const int32_t id : ids) s += static_cast<char>(id < 26 ? 'a' + id : 'A' + id - 26);
    return s;
  };
  auto complete = [&](const infer::StopRules& stop) {
    infer::Generator g(decoder, cache, infer::SamplingOptions{}, stop, letters);
    std::vector<infer::Completion> done;
    g.run({{0, {3, 1, 4, 1, 5}}, {1, {9, 2, 6}}}, [](const infer::Completion&) {},
          [&](infer::Completion&& c) { done.push_back(std::move(c)); });
    std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
    return done;
  };
  infer::StopRules plain;
  plain.max_new_tokens = 12;
  const std::vector<infer::Completion> free_run = complete(plain);
  ASSERT_EQ(free_run.size(), 2u);
  const infer::Completion& c = free_run[0];
  ASSERT_EQ(c.ids.size(), 12u);
  EXPECT_EQ(c.finish_reason, "length");
  EXPECT_EQ(c.text, letters(c.ids));
  EXPECT_EQ(c.logprobs.size(), 12u);

  infer::StopRules by_token = plain;
  by_token.stop_tokens = {c.ids[4]};
  const size_t first = static_cast<size_t>(std::find(c.ids.begin(), c.ids.end(), c.ids[4]) - c.ids.begin());
  const infer::Completion t = complete(by_token)[0];
  EXPECT_EQ(t.finish_reason, "stop");
  EXPECT_EQ(t.ids, std::vector<int32_t>(c.ids.begin(), c.ids.begin() + static_cast<std::ptrdiff_t>(first) + 1));
  EXPECT_EQ(t.text, letters(std::vector<int32_t>(c.ids.begin(), c.ids.begin() + static_cast<std::ptrdiff_t>(first))));

  infer::StopRules by_string = plain;
  by_string.stop_strings = {c.text.substr(6, 2)};
  const size_t cut = c.text.find(by_string.stop_strings[0]);
  const infer::Completion s = complete(by_string)[0];
  EXPECT_EQ(s.finish_reason, "stop");
  EXPECT_EQ(s.text, c.text.substr(0, cut));
  EXPECT_EQ(s.ids.size(), cut + 2);

  // The stats count the steps with a prefill apart: both prompts prefill in step 1 (their first
  // tokens), then 11 steps decode one token in each slot.
  infer::Generator g(decoder, cache, infer::SamplingOptions{}, plain, letters);
  g.run({{0, {3, 1, 4, 1, 5}}, {1, {9, 2, 6}}}, [](const infer::Completion&) {}, [](infer::Completion&&) {});
  EXPECT_EQ(g.stats().steps, 12);
  EXPECT_EQ(g.stats().generated_tokens, 24);
  EXPECT_EQ(g.stats().decode_tokens, 22);
  EXPECT_GT(g.stats().decode_seconds, 0.0);
  EXPECT_LE(g.stats().decode_seconds, g.stats().seconds);
}

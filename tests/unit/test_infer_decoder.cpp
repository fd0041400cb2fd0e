// lib/infer on checkpoints written here with random weights: the KV-cache path (a prefill, a
// chunk after it, then one token per step, several slots in one call) gives the logits of a full
// recompute of the sequence within relative 1e-5 at every position, for gpt2 and Llama with
// grouped-query and multi-query attention; under int8 activations a slot's logits do not depend on
// the slots batched with it; the sampler's draws depend only on (seed, prompt, position); bad
// tokens, lengths and models are refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
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
  const std::string family = c.llama() ? "llama" : "gpt";
  w.set_attr("model", c.moe_every > 0 ? "moe_" + family : family);
  if (c.moe_every > 0) {  // moe_train's attributes (gpt_workload.cpp)
    w.set_attr("model.moe_every", c.moe_every);
    w.set_attr("model.experts", c.moe.experts);
    w.set_attr("model.expert_hidden", c.moe.hidden);
    w.set_attr("model.top_k", static_cast<int64_t>(c.moe.router.top_k));
    w.set_attr("model.shared_experts", c.moe.shared_experts);
    w.set_attr("model.gates_renormalised", static_cast<int64_t>(c.moe.router.norm == nn::RouterNorm::softmax_topk));
  }
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

// moe_train's models: experts every `every` blocks, top-k routing, `shared` shared experts.
models::GptConfig with_experts(models::GptConfig c, int64_t every, int k, int64_t shared, nn::RouterNorm norm) {
  c.layers = 3;
  c.moe_every = every;
  c.moe.experts = 4;
  c.moe.hidden = 24;
  c.moe.router.top_k = k;
  c.moe.shared_experts = shared;
  c.moe.router.norm = norm;
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
// sequence decoding in a second slot in the same calls. bf16 weights: within `tol` (see
// Bf16Weights below), else 1e-5.
void check_cache_matches_recompute(const models::GptConfig& config, const std::string& name,
                                   infer::WeightPrecision weights = infer::WeightPrecision::f32, double tol = 1e-5) {
  const std::string path = write_checkpoint(config, name);
  const io::CheckpointReader reader(path, MPI_COMM_NULL);
  infer::Decoder decoder(reader, infer::model_config_of(reader), {}, {}, weights);
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
  expect_rows_near(got.data<float>(), full.data<float>(), prefill, V, tol, name + " prefill");
  at = prefill;
  got = decoder.forward({{2, other.data() + 5, 1, false}, {1, tokens.data() + at, 3, true}}, cache);
  expect_rows_near(got.data<float>() + V, full.data<float>() + at * V, 3, V, tol, name + " chunk after a prefill");
  at += 3;
  for (int64_t k = 6; at < L; ++at, ++k) {
    std::vector<infer::SlotTokens> chunks{{1, tokens.data() + at, 1, false}};
    if (k < L) chunks.push_back({2, other.data() + k, 1, false});
    got = decoder.forward(chunks, cache);
    expect_rows_near(got.data<float>(), full.data<float>() + at * V, 1, V, tol,
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

// bf16 weights (generate --weights bf16): the cache path against a full recompute, where the rows
// of a GEMM differ from one call to the next. bf16_weight_matmul rounds its activations to bf16
// whatever the rows (kernels/cpu/bf16_matmul_paths.h), so the paths differ by f32 summation order,
// except where that order moves an activation across a bf16 rounding boundary (2^-8 of it): 1e-3
// of the row's largest logit bounds that here.
TEST(InferDecoder, Bf16WeightsCacheMatchesRecomputeGpt2) {
  check_cache_matches_recompute(gpt2_config(), "gpt2_bf16.h5", infer::WeightPrecision::bf16, 1e-3);
}
TEST(InferDecoder, Bf16WeightsCacheMatchesRecomputeLlamaTied) {
  check_cache_matches_recompute(llama_config(2, true), "llama_bf16.h5", infer::WeightPrecision::bf16, 1e-3);
}

// bf16 weights hold the matrices in half the bytes, and their logits move from f32's by the bf16
// rounding of weights and activations (2^-8 relative each) carried through the layers: more than
// f32 rounding, within 3% of the row's largest logit for these two-layer models.
TEST(InferDecoder, Bf16WeightsHalveTheMatricesAndStayNearF32) {
  for (const models::GptConfig& config : {gpt2_config(), llama_config(2, false)}) {
    const std::string name = config.llama() ? "llama_bf16_vs_f32.h5" : "gpt2_bf16_vs_f32.h5";
    const std::string path = write_checkpoint(config, name);
    const io::CheckpointReader reader(path, MPI_COMM_NULL);
    infer::Decoder f32(reader, infer::model_config_of(reader));
    infer::Decoder bf16(reader, infer::model_config_of(reader), {}, {}, infer::WeightPrecision::bf16);
    EXPECT_EQ(bf16.weight_precision(), infer::WeightPrecision::bf16);
    // The block matrices (and the head, a bf16 copy beside a tied table) at 2 bytes an element.
    const int64_t C = config.hidden, V = config.vocab, F = config.mlp_hidden();
    const int64_t matrices = config.llama() ? config.layers * (C * C * 2 + 2 * C * config.kv() * (C / config.heads) + 3 * C * F)
                                            : config.layers * (4 * C * C + 2 * C * F);
    const int64_t head = config.tie_embeddings ? -V * C * 2 : V * C * 2;  // tied: a bf16 copy is added
    EXPECT_EQ(f32.parameter_bytes() - bf16.parameter_bytes(), matrices * 2 + head) << name;
    const int64_t L = 12;
    const std::vector<int32_t> tokens = sequence(L, V, 41);
    infer::KvCache a = f32.make_cache(1, L), b = bf16.make_cache(1, L);
    const Tensor want = f32.forward({{0, tokens.data(), L, true}}, a).clone();
    const Tensor got = bf16.forward({{0, tokens.data(), L, true}}, b);
    expect_rows_near(got.data<float>(), want.data<float>(), L, V, 3e-2, name + " bf16 against f32");
    double moved = 0;
    for (int64_t i = 0; i < L * V; ++i)
      moved = std::max(moved, std::fabs(static_cast<double>(got.data<float>()[i]) - want.data<float>()[i]));
    EXPECT_GT(moved, 1e-4) << name << ": bf16 changed no logit: the f32 weights were used";
  }
}

// Mixture-of-experts blocks (routed top-k over the cache path's differently batched rows).
TEST(InferDecoder, CacheMatchesRecomputeMoeGpt2TopOne) {
  check_cache_matches_recompute(with_experts(gpt2_config(), 2, 1, 0, nn::RouterNorm::softmax), "moe_gpt2.h5");
}
TEST(InferDecoder, CacheMatchesRecomputeMoeLlamaTopTwoSharedExperts) {
  check_cache_matches_recompute(with_experts(llama_config(2, false), 1, 2, 1, nn::RouterNorm::softmax_topk),
                                "moe_llama.h5");
}

// The MoE blocks use every expert they route to: the logits move when one expert's weights do
// (and an expert no token of the sequence chose changes nothing), and the shared experts count.
TEST(InferDecoder, MoeLogitsDependOnTheChosenExpertsAndSharedExperts) {
  const models::GptConfig c = with_experts(llama_config(2, false), 1, 2, 1, nn::RouterNorm::softmax_topk);
  const int64_t L = 12, V = c.vocab;
  const std::vector<int32_t> tokens = sequence(L, V, 31);
  auto logits = [&](const std::string& name, const EditTensor& edit) {
    const std::string path = write_checkpoint(c, name, edit);
    const io::CheckpointReader reader(path, MPI_COMM_NULL);
    infer::Decoder decoder(reader, infer::model_config_of(reader));
    infer::KvCache cache = decoder.make_cache(1, L);
    return decoder.forward({{0, tokens.data(), L, true}}, cache).clone();
  };
  auto moved = [&](const Tensor& a, const Tensor& b) {
    double m = 0;
    for (int64_t i = 0; i < L * V; ++i)
      m = std::max(m, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
    return m;
  };
  const Tensor base = logits("moe_base.h5", nullptr);
  // Every expert's down projection of block 0 scaled: some token routes to one of them.
  const Tensor experts = logits("moe_experts.h5", [](const std::string& p, std::vector<float>& v) {
    if (p == "blocks.0.moe.experts.down.weight")
      for (float& x : v) x *= 2.0f;
  });
  EXPECT_GT(moved(base, experts), 1e-3);
  const Tensor shared = logits("moe_shared.h5", [](const std::string& p, std::vector<float>& v) {
    if (p == "blocks.0.moe.shared.down.weight")
      for (float& x : v) x *= 2.0f;
  });
  EXPECT_GT(moved(base, shared), 1e-3);
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
// A MoE checkpoint: ckpt_tool quantize takes its 2-D block matrices (attention, shared experts)
// and leaves the router and the stacked [E, out, in] experts f32; generate runs it so.
TEST(InferDecoder, QuantizedInt8MoeLlamaKeepsExpertsF32) {
  check_quantized_matches_dequantized(with_experts(llama_config(2, false), 1, 2, 1, nn::RouterNorm::softmax_topk), 8,
                                      8, "moe_llama_int8");
  const io::CheckpointReader q((scratch_dir() / "moe_llama_int8.q.h5").string(), MPI_COMM_NULL);
  EXPECT_TRUE(q.has(quant::quantized_path("blocks.0.moe.shared.gate.weight", "q")));
  EXPECT_FALSE(q.has(quant::quantized_path("blocks.0.moe.experts.gate.weight", "q")));
  EXPECT_FALSE(q.has(quant::quantized_path("blocks.0.moe.router.weight", "q")));
  EXPECT_TRUE(q.has("/params/blocks.0.moe.experts.gate.weight"));
}

// int8 activations (generate --activations int8): every quantised matrix (the head too) packed once
// at load, its products integer sums whose rows never depend on the rows beside them, so a slot's
// logits are the same bits whether it runs alone or batched with other slots (prefill and decode);
// they stay near the f32-activation logits (each activation moves by at most half its group's
// step), and the packed matrices are counted in the parameter bytes, above the quantised ones.
void check_int8_activations_batch_independent(const models::GptConfig& config, int bits, int64_t group,
                                              const std::string& name) {
  const std::string f32 = write_checkpoint(config, name + ".h5");
  const std::string quantized = (scratch_dir() / (name + ".q.h5")).string();
  quant::QuantizeOptions options;
  options.bits = bits;
  options.group_size = group;
  options.head = true;
  quant::quantize_checkpoint(f32, quantized, options);
  const io::CheckpointReader reader(quantized, MPI_COMM_NULL);
  const models::GptConfig c = infer::model_config_of(reader);
  infer::Decoder weights_only(reader, c);
  infer::Decoder decoder(reader, c, {}, {}, infer::WeightPrecision::f32, infer::ActivationPrecision::int8);
  EXPECT_GT(decoder.parameter_bytes(), weights_only.parameter_bytes()) << name << ": offsets and padding";
  EXPECT_LT(decoder.parameter_bytes(), weights_only.parameter_bytes() * 2) << name << ": blocks of 32 rows, tiny here";
  const int64_t L = 16, V = c.vocab, prefill = 5;
  const std::vector<int32_t> tokens = sequence(L, V, 51), a = sequence(L, V, 52), b = sequence(L, V, 53);

  infer::KvCache alone_cache = decoder.make_cache(1, L);
  const Tensor alone_prefill = decoder.forward({{0, tokens.data(), prefill, true}}, alone_cache).clone();
  std::vector<Tensor> alone;
  for (int64_t at = prefill; at < L; ++at) alone.push_back(decoder.forward({{0, tokens.data() + at, 1, false}}, alone_cache).clone());

  infer::KvCache cache = decoder.make_cache(3, 2 * L);
  decoder.forward({{0, a.data(), 3, false}, {2, b.data(), 7, false}}, cache);
  Tensor got = decoder.forward({{0, a.data() + 3, 1, false}, {1, tokens.data(), prefill, true}, {2, b.data() + 7, 1, false}},
                               cache);
  auto same = [&](const float* x, const float* y, int64_t rows, const std::string& what) {
    for (int64_t i = 0; i < rows * V; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(x[i]), std::bit_cast<uint32_t>(y[i])) << name << " " << what << ", logit " << i;
  };
  same(got.data<float>() + V, alone_prefill.data<float>(), prefill, "prefill beside two slots");
  for (int64_t at = prefill, k = 0; at < L; ++at, ++k) {
    std::vector<infer::SlotTokens> chunks{{2, b.data() + 8 + k % 7, 1, false}, {1, tokens.data() + at, 1, false}};
    if (k < 10) chunks.push_back({0, a.data() + 4 + k, 1, false});
    got = decoder.forward(chunks, cache);
    same(got.data<float>() + V, alone[static_cast<size_t>(k)].data<float>(), 1, "decode at " + std::to_string(at));
  }

  infer::KvCache f32_cache = weights_only.make_cache(1, L);
  const Tensor f32_logits = weights_only.forward({{0, tokens.data(), prefill, true}}, f32_cache);
  expect_rows_near(alone_prefill.data<float>(), f32_logits.data<float>(), prefill, V, 0.05,
                   name + " int8 against f32 activations");
  double moved = 0;
  for (int64_t i = 0; i < prefill * V; ++i)
    moved = std::max(moved, std::fabs(static_cast<double>(alone_prefill.data<float>()[i]) - f32_logits.data<float>()[i]));
  EXPECT_GT(moved, 0.0) << name << ": int8 activations changed no logit";
}

TEST(InferDecoder, Int8ActivationsInt4Gpt2SlotIndependentOfItsBatch) {
  check_int8_activations_batch_independent(gpt2_config(), 4, 8, "gpt2_int4_a8");
}
TEST(InferDecoder, Int8ActivationsInt8LlamaSlotIndependentOfItsBatch) {
  check_int8_activations_batch_independent(llama_config(2, false), 8, 16, "llama_int8_a8");
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
  auto complete = [&](const infer::StopRules& stop, bool logprobs = true) {
    infer::Generator g(decoder, cache, infer::SamplingOptions{}, stop, letters, logprobs);
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
  // Without log-probabilities (generate without --logprobs): the same tokens, none recorded.
  const infer::Completion quiet = complete(plain, false)[0];
  EXPECT_EQ(quiet.ids, c.ids);
  EXPECT_TRUE(quiet.logprobs.empty());

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

// Unit tests of document masking in models::Gpt (--document-mask): a packed window of several
// documents gives the loss and every parameter gradient of running each document alone (its own
// window, positions from 0), weighted by its share of the positions, for the gpt2 arch (learned
// positions) and the llama arch (rotary positions); and without the mask the packed run differs
// (the test would notice a mask that does nothing).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/philox.h"
#include "models/gpt/gpt.h"

using tessera::Device;
using tessera::Tensor;
using tessera::models::Gpt;
using tessera::models::GptConfig;

namespace {

GptConfig config(bool llama) {
  GptConfig c;
  c.vocab = 13;
  c.max_seq = 16;
  c.layers = 2;
  c.hidden = 16;
  c.heads = 4;
  if (llama) {
    c.arch = tessera::models::Arch::llama;
    c.kv_heads = 2;
    c.ffn_hidden = 24;
    c.tie_embeddings = false;
  }
  return c;
}

std::vector<double> gradients(Gpt& m) {
  std::vector<double> g;
  tessera::nn::ParamStore& s = m.params();
  for (int i = 0; i < s.size(); ++i) {
    const Tensor t = s.logical_copy(s.grad(i), i);
    g.insert(g.end(), t.data<float>(), t.data<float>() + t.numel());
  }
  return g;
}

double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    n += b[i] * b[i];
  }
  return std::sqrt(d / n);
}

// Row b of the packed batch holds documents of lengths docs[b] (summing to seq), each row seq + 1
// tokens (the last target is the next window's first token, as the loader cuts them).
void expect_packed_equals_alone(bool llama, const std::vector<std::vector<int64_t>>& docs, int64_t seq) {
  const GptConfig cfg = config(llama);
  const int64_t batch = static_cast<int64_t>(docs.size());
  const uint64_t seed = 11;
  std::vector<int32_t> rows(static_cast<size_t>(batch * (seq + 1))), segments(static_cast<size_t>(batch * seq));
  for (size_t i = 0; i < rows.size(); ++i)
    rows[i] = static_cast<int32_t>(tessera::philox_bits(3, tessera::stream_id("test.docs"), i)[0] % cfg.vocab);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t t = 0;
    for (size_t d = 0; d < docs[b].size(); ++d)
      for (int64_t i = 0; i < docs[b][d]; ++i) segments[static_cast<size_t>(b * seq + t++)] = static_cast<int32_t>(d);
    ASSERT_EQ(t, seq);
  }

  Gpt packed(cfg, Device::cpu, seed, batch, seq);
  packed.params().zero_grads();
  const float loss = packed.forward_backward(rows.data(), 1.0f, nullptr, {}, segments.data());
  const std::vector<double> grads = gradients(packed);

  // Each document alone, its loss share L / (B x T) of the packed mean, its gradients scaled alike.
  double alone_loss = 0;
  std::vector<double> alone_grads(grads.size(), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t start = 0;
    for (const int64_t n : docs[b]) {
      Gpt one(cfg, Device::cpu, seed, 1, n);
      one.params().zero_grads();
      const float share = static_cast<float>(n) / static_cast<float>(batch * seq);
      const int32_t* row = rows.data() + b * (seq + 1) + start;
      const std::vector<int32_t> doc_row(row, row + n + 1);
      alone_loss += share * one.forward_backward(doc_row.data(), share);
      const std::vector<double> g = gradients(one);
      for (size_t i = 0; i < g.size(); ++i) alone_grads[i] += g[i];
      start += n;
    }
  }
  const std::string what = llama ? "llama" : "gpt2";
  EXPECT_NEAR(loss, alone_loss, 2e-6 * std::fabs(alone_loss)) << what;
  const double err = rel_diff(grads, alone_grads);
  std::printf("  %s: packed loss %.7f, documents alone %.7f; gradients rel. difference %.3g\n", what.c_str(), loss,
              alone_loss, err);
  EXPECT_LT(err, 2e-5) << what << ": the packed gradients differ from the documents' alone";

  // The same window without the mask attends across documents: a different loss.
  Gpt unmasked(cfg, Device::cpu, seed, batch, seq);
  EXPECT_GT(std::fabs(unmasked.forward(rows.data()) - alone_loss), 1e-4) << what << ": the mask changed nothing";
}

TEST(GptDocumentMask, PackedWindowEqualsEachDocumentAloneGpt2) {
  expect_packed_equals_alone(false, {{5, 3, 1, 3}, {12}}, 12);
}

TEST(GptDocumentMask, PackedWindowEqualsEachDocumentAloneLlama) {
  expect_packed_equals_alone(true, {{2, 6, 4}, {7, 5}}, 12);
}

}  // namespace

// Unit tests of lib/text on hand-made tokenizers whose ids are worked out by hand: the byte-to-
// unicode table, the PCRE2 pre-tokenizer split, BPE merge ranks, ignore_merges, added tokens, both
// merge forms, the refusals of what is not supported (a float id: what fuzz_tokenizer_json found, UB
// in the conversion), and the tokenizer stored in a data set.
// (The real tokenizers are checked against their own libraries by tests/tokenizers/.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <set>
#include <string>

#include "core/error.h"
#include "io/hdf5_file.h"
#include "text/byte_unicode.h"
#include "text/regex_splitter.h"
#include "text/stored_tokenizer.h"
#include "text/tokenizer.h"
#include "text/unicode_nfc.h"

namespace fs = std::filesystem;
using tessera::text::make_tokenizer;
using Ids = std::vector<int32_t>;

namespace {

constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A byte-level BPE over the characters a, b, c and space ("Ġ"), with `merges` (JSON) and
// `extra` fields spliced into the model object.
std::string bpe_json(const std::string& merges, const std::string& model_extra = "",
                     const std::string& top_extra = "") {
  return R"({"added_tokens": [{"id": 10, "content": "<s>", "special": true}],)" + top_extra +
         R"( "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
             "decoder": {"type": "ByteLevel"},
             "model": {"type": "BPE", )" + model_extra +
         R"( "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "bc": 5, "abc": 6, "Ġa": 7},
             "merges": )" + merges + "}}";
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const tessera::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ByteUnicode, PrintableBytesStandForThemselvesOthersFromU0100) {
  const auto& table = tessera::text::byte_to_unicode();
  EXPECT_EQ(table['a'], "a");
  EXPECT_EQ(table['!'], "!");
  EXPECT_EQ(table[' '], "Ġ");   // U+0120: the 33rd non-printable byte
  EXPECT_EQ(table[0], "Ā");     // U+0100
  EXPECT_EQ(table['\n'], "Ċ");  // U+010A
  EXPECT_EQ(std::set<std::string>(table.begin(), table.end()).size(), 256u);
  for (int b = 0; b < 256; ++b) {
    const std::string& s = table[static_cast<size_t>(b)];
    const uint32_t cp = s.size() == 1 ? static_cast<unsigned char>(s[0])
                                      : ((static_cast<unsigned char>(s[0]) & 0x1fu) << 6) |
                                            (static_cast<unsigned char>(s[1]) & 0x3fu);
    EXPECT_EQ(tessera::text::unicode_to_byte(cp), b);
  }
  EXPECT_EQ(tessera::text::unicode_to_byte(0x4e00), -1);
}

TEST(RegexSplitter, Gpt2PatternKeepsEverySpaceAndLetterRun) {
  const tessera::text::RegexSplitter split(kGpt2Regex);
  const auto pieces = split.split("Héllo  wörld's 42!\n");
  const std::vector<std::string_view> want = {"Héllo", " ", " wörld", "'s", " 42", "!", "\n"};
  EXPECT_EQ(pieces, want);
}

TEST(RegexSplitter, GapsBetweenMatchesArePiecesToo) {
  const tessera::text::RegexSplitter split(R"(\d+)");
  const std::vector<std::string_view> want = {"ab", "12", "c", "345"};
  EXPECT_EQ(split.split("ab12c345"), want);
}

TEST(RegexSplitter, InvalidUtf8AndBadPatternsAreNamed) {
  const tessera::text::RegexSplitter split(kGpt2Regex);
  EXPECT_NE(error_of([&] { split.split("ok \xff bad"); }).find("not valid UTF-8 at byte 3"), std::string::npos)
      << error_of([&] { split.split("ok \xff bad"); });
  EXPECT_NE(error_of([] { tessera::text::RegexSplitter bad("(unclosed"); }).find("invalid pre-tokenizer regex"),
            std::string::npos);
}

TEST(RegexSplitter, CatastrophicBacktrackingStopsWithAnError) {
  const tessera::text::RegexSplitter split(R"((\w|\w\w)+$)");
  EXPECT_NE(error_of([&] { split.split(std::string(60, 'a') + "!"); }).find("steps to match"), std::string::npos);
}

TEST(ByteLevelBpe, MergesApplyLowestRankFirst) {
  const auto bc_first = make_tokenizer("hf-byte-level-bpe", bpe_json(R"(["b c", "a b", "Ġ a"])"), "t.json");
  EXPECT_EQ(bc_first->encode("abc"), (Ids{0, 5}));  // a + bc: "b c" outranks "a b"
  const auto ab_first = make_tokenizer("hf-byte-level-bpe", bpe_json(R"(["a b", "b c", "Ġ a"])"), "t.json");
  EXPECT_EQ(ab_first->encode("abc"), (Ids{4, 2}));
  EXPECT_EQ(ab_first->encode("abc ab"), (Ids{4, 2, 3, 4}));  // " ab": "a b" before "Ġ a"
  EXPECT_EQ(ab_first->vocab_size(), 11);                    // the added token's id 10
}

TEST(ByteLevelBpe, PairFormOfMergesEqualsStringForm) {
  const auto strings = make_tokenizer("hf-byte-level-bpe", bpe_json(R"(["b c", "a b"])"), "t.json");
  const auto pairs = make_tokenizer("hf-byte-level-bpe", bpe_json(R"([["b", "c"], ["a", "b"]])"), "t.json");
  EXPECT_EQ(strings->encode("cabc abcab"), pairs->encode("cabc abcab"));
}

TEST(ByteLevelBpe, IgnoreMergesTakesAWholeWordInTheVocabulary) {
  const auto t = make_tokenizer("hf-byte-level-bpe", bpe_json(R"(["a b"])", R"("ignore_merges": true,)"), "t.json");
  EXPECT_EQ(t->encode("abc"), (Ids{6}));
  EXPECT_EQ(t->encode("cab"), (Ids{2, 4}));
}

TEST(ByteLevelBpe, AddedTokensAreCutOutFirstAndDecodeAsWritten) {
  const auto t = make_tokenizer("hf-byte-level-bpe", bpe_json(R"(["a b"])"), "t.json");
  EXPECT_EQ(t->encode("ab<s>c"), (Ids{4, 10, 2}));
  EXPECT_EQ(t->decode({4, 10, 3, 2}), "ab<s> c");
  EXPECT_NE(error_of([&] { t->decode({4, 11}); }).find("token 1 is 11, outside the vocabulary [0, 11)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { t->decode({9}); }).find("an id no token"), std::string::npos);
}

TEST(ByteLevelBpe, NfcNormalizerComposesBeforeSplitting) {
  // "é" composed is c3 a9; decomposed, "e" + U+0301 (cc 81). Neither byte run has merges here.
  const std::string json = bpe_json("[]", "", R"("normalizer": {"type": "NFC"},)");
  if (!tessera::text::have_nfc()) {
    EXPECT_NE(error_of([&] { make_tokenizer("hf-byte-level-bpe", json, "t.json"); }).find("libutf8proc"),
              std::string::npos);
    return;
  }
  const auto& chars = tessera::text::byte_to_unicode();  // tokens for the bytes c3 a9 cc 81
  std::string vocab_json = json;
  vocab_json.replace(vocab_json.find("\"Ġa\": 7"), 8,
                     "\"Ġa\": 7, \"" + chars[0xc3] + "\": 20, \"" + chars[0xa9] + "\": 21, \"e\": 22, \"" +
                         chars[0xcc] + "\": 23, \"" + chars[0x81] + "\": 24");
  const auto t = make_tokenizer("hf-byte-level-bpe", vocab_json, "t.json");
  EXPECT_EQ(t->encode("e\xcc\x81"), (Ids{20, 21}));
  EXPECT_EQ(t->encode("\xc3\xa9"), (Ids{20, 21}));
}

TEST(ByteLevelBpe, ByteWithoutATokenIsNamed) {
  const auto t = make_tokenizer("hf-byte-level-bpe", bpe_json("[]"), "t.json");
  EXPECT_NE(error_of([&] { t->encode("abz"); }).find("byte 0x7a"), std::string::npos);
}

TEST(ByteLevelBpe, UnsupportedConfigurationsAreRefusedByName) {
  auto refusal = [](const std::string& json) {
    return error_of([&] { make_tokenizer("hf-byte-level-bpe", json, "t.json"); });
  };
  std::string wordpiece = bpe_json("[]");
  wordpiece.replace(wordpiece.find("\"BPE\""), 5, "\"WordPiece\"");
  EXPECT_NE(refusal(wordpiece).find("model.type is 'WordPiece'"), std::string::npos);
  EXPECT_NE(refusal(bpe_json("[]", "", R"("normalizer": {"type": "NFKC"},)")).find("normalizer 'NFKC'"),
            std::string::npos);
  EXPECT_NE(refusal(bpe_json("[]", R"("dropout": 0.1,)")).find("dropout"), std::string::npos);
  EXPECT_NE(refusal(bpe_json(R"(["a x"])")).find("model.merges[0]: the right part 'x' is not in model.vocab"),
            std::string::npos);
  EXPECT_NE(refusal(bpe_json(R"(["a b c"])")).find("not two tokens"), std::string::npos);
  EXPECT_NE(refusal("{\"model\": ").find("t.json: not valid JSON"), std::string::npos);
  std::string huge_id = bpe_json("[]");
  huge_id.replace(huge_id.find("\"Ġa\": 7"), 8, "\"Ġa\": 1073741824");
  EXPECT_NE(refusal(huge_id).find("the id 1073741824"), std::string::npos) << refusal(huge_id);
  std::string float_id = bpe_json("[]");
  float_id.replace(float_id.find("\"Ġa\": 7"), 8, "\"Ġa\": 4.6e113");
  EXPECT_NE(refusal(float_id).find("not an integer id"), std::string::npos) << refusal(float_id);
  std::string metaspace = bpe_json("[]");
  metaspace.replace(metaspace.find("\"ByteLevel\""), 11, "\"Metaspace\"");
  EXPECT_NE(refusal(metaspace).find("pre_tokenizer.type is 'Metaspace'"), std::string::npos);
}

TEST(Tokenizer, KindsByFileNameAndBytes) {
  EXPECT_EQ(tessera::text::tokenizer_kind_of_path("/m/tokenizer.model"), "sentencepiece");
  EXPECT_EQ(tessera::text::tokenizer_kind_of_path("tokenizer.json"), "hf-byte-level-bpe");
  EXPECT_NE(error_of([] { tessera::text::tokenizer_kind_of_path("vocab.txt"); }).find("unknown kind"),
            std::string::npos);
  const auto bytes = make_tokenizer("bytes", "", "");
  EXPECT_EQ(bytes->encode("A\xff"), (Ids{65, 255}));
  EXPECT_EQ(bytes->decode({65, 255}), "A\xff");
  if (tessera::text::have_sentencepiece()) {
    EXPECT_NE(error_of([] { make_tokenizer("sentencepiece", "not a model", "x.model"); })
                  .find("x.model: not a SentencePiece model"),
              std::string::npos);
  } else {
    EXPECT_NE(error_of([] { make_tokenizer("sentencepiece", "", "x.model"); }).find("no SentencePiece support"),
              std::string::npos);
  }
}

TEST(StoredTokenizer, TravelsInTheDataSetAndIsChecked) {
  const fs::path path = fs::temp_directory_path() / ("tessera_text_stored_" + std::to_string(getpid()) + ".h5");
  const std::string json = bpe_json(R"(["a b"])");
  {
    auto f = tessera::io::H5File::create(path.string());
    tessera::text::store_tokenizer(f, "hf-byte-level-bpe", json, "tokenizer.json");
  }
  {
    const auto f = tessera::io::H5File::open_read(path.string());
    EXPECT_EQ(f.attr_string("/", "tokenizer_checksum"), tessera::text::tokenizer_checksum(json));
    EXPECT_EQ(tessera::text::load_stored_tokenizer(f)->encode("ab c"), (Ids{4, 3, 2}));
  }
  {
    auto f = tessera::io::H5File::open_rw(path.string());
    f.set_attr("/", "tokenizer_checksum", "0000000000000000");
  }
  EXPECT_NE(error_of([&] { tessera::text::load_stored_tokenizer(tessera::io::H5File::open_read(path.string())); })
                .find("the file is damaged"),
            std::string::npos);
  {
    auto f = tessera::io::H5File::open_rw(path.string());
    f.set_attr("/", "tokenizer", "synthetic-markov");
  }
  EXPECT_NE(error_of([&] { tessera::text::load_stored_tokenizer(tessera::io::H5File::open_read(path.string())); })
                .find("no text to decode to"),
            std::string::npos);
  fs::remove(path);
}

}  // namespace

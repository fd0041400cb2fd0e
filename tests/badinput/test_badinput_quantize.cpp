// `ckpt_tool quantize` on a tiny checkpoint gpt_train makes here: end to end (int8 and int4, f32
// and bf16 scales: inspect and verify read the result, every quantised matrix loads and
// dequantises within half a step of the f32 weights it came from, and quant::matmul equals the
// dequantised product), and each bad input refused with exit 1 and one "error:" line naming the
// problem, nothing written: an existing output (left as it was), a group size that does not divide
// the input dimension, an odd int4 group, bits other than 8 or 4, an already quantised input, and
// a trainer given a quantised checkpoint, and export-hf given one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "io/checkpoint_file.h"
#include "quant/quantized_checkpoint.h"
#include "quant/quantized_matrix.h"
#include "run_command.h"

namespace fs = std::filesystem;
using tessera::testing::CommandResult;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

const std::string kApps = TESSERA_BUILD_DIR "/apps/";
const std::string kEnv = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 ";
// hidden 32, mlp 128: every block weight has 32 or 128 input features.
const std::string kModel = "--layers 2 --hidden 32 --heads 2 --seq-len 8 --global-batch 2 --threads 1";

class Quantize : public ::testing::Test {
 protected:
  // One tiny trained checkpoint for the whole suite (two gpt_train steps).
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tessera_badinput_quantize_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    data_ = (dir_ / "data.h5").string();
    const CommandResult d =
        run_command(kApps + "data_prep synth --vocab 40 --tokens 4000 --seed 3 --output " + shell_quote(data_));
    ASSERT_EQ(d.exit_code, 0) << d.err;
    const CommandResult t = run_command(kEnv + kApps + "gpt_train --input " + shell_quote(data_) + " " + kModel +
                                        " --steps 2 --checkpoint-dir " + shell_quote((dir_ / "ck").string()));
    ASSERT_EQ(t.exit_code, 0) << t.err;
    source_ = (dir_ / "ck" / "step_2.h5").string();
    ASSERT_TRUE(fs::exists(source_));
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string file(const std::string& name) { return (dir_ / name).string(); }
  static CommandResult tool(const std::string& args) { return run_command(kEnv + kApps + "ckpt_tool " + args); }
  static CommandResult quantize(const std::string& source, const std::string& output, const std::string& args) {
    return tool("quantize " + shell_quote(source) + " --output " + shell_quote(output) + " " + args);
  }

  static void expect_refused(const CommandResult& r, const std::vector<std::string>& words) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("error:"), r.err.rfind("error:")) << "more than one error line: " << r.err;
    EXPECT_EQ(r.err.find("HDF5-DIAG"), std::string::npos) << r.err;
    for (const std::string& w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "'" << w << "' not in: " << r.err;
  }

  static inline fs::path dir_;
  static inline std::string data_, source_;
};

// Every matrix of the quantised file against the source's f32 weights, and the product.
void check_quantised(const std::string& source, const std::string& quantised, int bits, int64_t group) {
  const tessera::io::CheckpointReader f32(source, MPI_COMM_NULL), q(quantised, MPI_COMM_NULL);
  ASSERT_TRUE(tessera::quant::is_quantized(q));
  EXPECT_EQ(q.attr_int("bits"), bits);
  EXPECT_EQ(q.attr_int("group_size"), group);
  EXPECT_EQ(q.attr_int("step"), f32.attr_int("step"));  // the source's attributes are kept
  int matrices = 0;
  for (const std::string& path : f32.tensors()) {
    if (path.rfind("/optim/", 0) == 0) {
      EXPECT_FALSE(q.has(path)) << path << ": the optimizer state is not copied";
      continue;
    }
    const std::string name = path.substr(std::string("/params/").size());
    const tessera::Shape shape = f32.shape(path);
    std::vector<float> w(static_cast<size_t>(shape.numel()));
    f32.read_range(path, 0, shape.numel(), w.data());
    if (!tessera::quant::quantized_tensor(name, shape, false)) {  // kept as it was, bit for bit
      ASSERT_TRUE(q.has(path)) << path;
      std::vector<float> kept(w.size());
      q.read_range(path, 0, shape.numel(), kept.data());
      EXPECT_EQ(kept, w) << path;
      continue;
    }
    EXPECT_FALSE(q.has(path)) << path << " is quantised: no f32 copy";
    const tessera::quant::QuantizedMatrix m = tessera::quant::QuantizedMatrix::load(q, name);
    ASSERT_EQ(m.rows(), shape[0]);
    ASSERT_EQ(m.cols(), shape[1]);
    std::vector<float> back(w.size());
    m.dequantize(back.data());
    for (int64_t n = 0; n < shape[0]; ++n)
      for (int64_t k = 0; k < shape[1]; ++k) {
        const float s = m.scales()[n * (shape[1] / group) + k / group];
        ASSERT_LE(std::fabs(back[n * shape[1] + k] - w[n * shape[1] + k]), 0.5f * s * (1 + 1e-5f) + 1e-12f)
            << name << " [" << n << ", " << k << "]";
      }
    // quant::matmul, M = 1 and M = 3, against the dequantised product in double (f32 sums only).
    for (int64_t M : {1, 3}) {
      std::vector<float> x(static_cast<size_t>(M * shape[1])), y(static_cast<size_t>(M * shape[0]));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) + 0.1f;
      tessera::quant::matmul(x.data(), M, m, y.data());
      for (int64_t i = 0; i < M; ++i)
        for (int64_t n = 0; n < shape[0]; ++n) {
          double exact = 0, magnitude = 0;
          for (int64_t k = 0; k < shape[1]; ++k) {
            const double p = double(x[i * shape[1] + k]) * back[n * shape[1] + k];
            exact += p, magnitude += std::fabs(p);
          }
          const double u = std::ldexp(1.0, -24), gamma = shape[1] * u / (1 - shape[1] * u) + u;
          ASSERT_LE(std::fabs(y[i * shape[0] + n] - exact), gamma * magnitude + 1e-30) << name;
        }
    }
    ++matrices;
  }
  EXPECT_EQ(matrices, 2 * 4) << "qkv, attn proj, fc and mlp proj of two blocks";
}

}  // namespace

TEST_F(Quantize, EndToEndOnAGptTrainCheckpoint) {
  struct Variant {
    int bits;
    int64_t group;
    const char* scales;
    const char* text;
  };
  for (const Variant& v : {Variant{8, 32, "f32", "int8, group size 32, f32 scales"},
                           Variant{4, 16, "bf16", "int4, group size 16, bf16 scales"},
                           Variant{4, 32, "f32", "int4, group size 32, f32 scales"}}) {
    SCOPED_TRACE(v.text);
    const std::string out =
        file(std::string("q") + std::to_string(v.bits) + "_" + std::to_string(v.group) + v.scales + ".h5");
    const CommandResult r = quantize(source_, out,
                                     "--bits " + std::to_string(v.bits) + " --group-size " + std::to_string(v.group) +
                                         " --scale-dtype " + v.scales);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("8 weight matrices"), std::string::npos) << r.out;
    const CommandResult inspect = tool("inspect " + shell_quote(out));
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    EXPECT_NE(inspect.out.find(std::string("quantisation: ") + v.text), std::string::npos) << inspect.out;
    EXPECT_NE(inspect.out.find("/qparams/blocks.0.attn.qkv.weight/q"), std::string::npos) << inspect.out;
    const CommandResult verify = tool("verify " + shell_quote(out));
    EXPECT_EQ(verify.exit_code, 0) << verify.err;
    check_quantised(source_, out, v.bits, v.group);
    EXPECT_LT(fs::file_size(out), fs::file_size(source_));
  }
  const CommandResult plain = tool("inspect " + shell_quote(source_));
  EXPECT_NE(plain.out.find("quantisation: none (f32)"), std::string::npos) << plain.out;
}

TEST_F(Quantize, ExistingOutputIsNotOverwritten) {
  const std::string out = file("exists.h5");
  std::ofstream(out) << "keep me\n";
  expect_refused(quantize(source_, out, "--bits 8 --group-size 32"), {out, "already exists"});
  std::ifstream in(out);
  std::stringstream kept;
  kept << in.rdbuf();
  EXPECT_EQ(kept.str(), "keep me\n");
}

TEST_F(Quantize, GroupSizeThatDoesNotDivideTheInputDimension) {
  const std::string out = file("g24.h5");
  expect_refused(quantize(source_, out, "--bits 8 --group-size 24"),
                 {"--group-size 24 does not divide the input dimension 32 of blocks.0.attn.proj.weight [32, 32]"});
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

TEST_F(Quantize, OddGroupSizeForInt4) {
  const std::string out = file("g1.h5");
  expect_refused(quantize(source_, out, "--bits 4 --group-size 1"), {"--group-size 1 is odd", "int4"});
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Quantize, BitsOtherThanEightOrFour) {
  const std::string out = file("b3.h5");
  expect_refused(quantize(source_, out, "--bits 3 --group-size 32"), {"--bits must be 8 or 4, not 3"});
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Quantize, AlreadyQuantisedInput) {
  const std::string q8 = file("once.h5"), twice = file("twice.h5");
  ASSERT_EQ(quantize(source_, q8, "--bits 8 --group-size 32").exit_code, 0);
  expect_refused(quantize(q8, twice, "--bits 4 --group-size 32"),
                 {q8, "is already quantised (int8, group size 32, f32 scales)"});
  EXPECT_FALSE(fs::exists(twice));
}

// gpt_train --resume FILE and --resume auto (a quantised step file in the run's folder), and
// moe_train --resume FILE: refused
// with the reason, nothing trained, the file left as it was.
TEST_F(Quantize, TrainerRefusesAQuantisedCheckpoint) {
  const fs::path ck = dir_ / "qck";
  fs::create_directories(ck);
  const std::string q = (ck / "step_2.h5").string();
  ASSERT_EQ(quantize(source_, q, "--bits 4 --group-size 32").exit_code, 0);
  const auto size = fs::file_size(q);
  const std::string train = kEnv + kApps + "gpt_train --input " + shell_quote(data_) + " " + kModel + " --steps 4 ";
  for (const std::string& resume : {"--resume " + shell_quote(q), "--checkpoint-dir " + shell_quote(ck.string()) +
                                                                       " --resume auto"}) {
    SCOPED_TRACE(resume);
    const CommandResult r = run_command(train + resume);
    expect_refused(r, {"is quantised for inference (int4, group size 32, f32 scales): use generate"});
    EXPECT_EQ(fs::file_size(q), size);
    EXPECT_FALSE(fs::exists(ck / "step_4.h5"));
  }
  // moe_train (the same trainer's loading): refused before it looks at the model.
  const CommandResult moe = run_command(kEnv + kApps + "moe_train --input " + shell_quote(data_) + " " + kModel +
                                        " --steps 4 --resume " + shell_quote(q));
  expect_refused(moe, {"is quantised for inference (int4, group size 32, f32 scales): use generate"});
  // --init-from (fine-tuning) reads the same checkpoint the same way.
  const CommandResult init = run_command(train + "--init-from " + shell_quote(q));
  expect_refused(init, {"cannot initialise from it", "is quantised for inference (int4, group size 32"});
}

// vit_train resumes through the same checkpoint loading: a quantised ViT checkpoint is refused too.
TEST_F(Quantize, VitTrainRefusesAQuantisedCheckpoint) {
  const std::string images = file("images.h5");
  const std::string vit =
      std::string("vit_train --input ") + shell_quote(images) + " --layers 2 --hidden 32 --heads 2 --patch 4 --threads 1 ";
  ASSERT_EQ(run_command(kApps + "data_prep synth-images --classes 4 --train 32 --test 8 --size 8 --seed 1 --output " +
                        shell_quote(images))
                .exit_code,
            0);
  const CommandResult made =
      run_command(kEnv + kApps + vit + "--steps 1 --checkpoint-dir " + shell_quote(file("vit_ck")));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string q = file("vit_q.h5");
  ASSERT_EQ(quantize(file("vit_ck/step_1.h5"), q, "--bits 8 --group-size 16").exit_code, 0);
  const CommandResult r = run_command(kEnv + kApps + vit + "--steps 2 --resume " + shell_quote(q));
  expect_refused(r, {"cannot resume", "is quantised for inference (int8, group size 16, f32 scales): use generate"});
}

// export-hf of a quantised checkpoint: refused with the reason, no folder written.
TEST_F(Quantize, ExportHfRefusesAQuantisedCheckpoint) {
  const std::string q = file("for_export.h5"), out = file("hf_out");
  ASSERT_EQ(quantize(source_, q, "--bits 8 --group-size 32").exit_code, 0);
  expect_refused(tool("export-hf " + shell_quote(q) + " --output " + shell_quote(out)),
                 {"is quantised for inference (int8, group size 32, f32 scales): export the f32 checkpoint"});
  EXPECT_FALSE(fs::exists(out) && !fs::is_empty(out));
}

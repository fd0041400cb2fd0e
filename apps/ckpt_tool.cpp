// ckpt_tool: looks into tessera checkpoints without MPI: `inspect` (attributes, and each tensor's
// shape and L2 norm) and `verify` (every tensor against its checksum); converts Hugging Face model
// folders to and from them (`import-hf`, `export-hf`: apps/common/hf_checkpoint.h); `quantize`
// writes a checkpoint's block weights as int8 / int4 for inference (lib/quant/quantized_checkpoint.h).
#include <boost/program_options.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "apps/common/cli.h"
#include "apps/common/hf_checkpoint.h"
#include "core/error.h"
#include "io/checkpoint_file.h"
#include "io/safetensors_folder.h"
#include "quant/quantized_checkpoint.h"

namespace po = boost::program_options;
using tessera::io::CheckpointReader;

namespace {

constexpr const char* kUsage =
    "usage: ckpt_tool <command> ARGS\n"
    "\n"
    "Looks into a tessera checkpoint (HDF5, one file per step).\n"
    "\n"
    "commands:\n"
    "  inspect FILE   step, consumed samples, layout, quantisation, every root attribute, and a\n"
    "                 table of the tensors: name, shape, L2 norm (or the stored integer type)\n"
    "  verify FILE    reads every tensor and checks it against its checksum; prints\n"
    "                 \"ok: FILE (N tensors)\" and exits 0, or \"error: ...\" and exits 1\n"
    "  import-hf DIR --output FILE.h5\n"
    "                 a Hugging Face model folder (config.json, safetensors; gpt2, llama, mistral)\n"
    "                 to a tessera checkpoint at step 0; prints the gpt_train options of the model\n"
    "  export-hf FILE.h5 --output DIR [--dtype f32|bf16|f16] [--max-shard-size 2GB]\n"
    "            [--norm-eps X] [--rope-theta X]   (llama: values gpt_train does not record)\n"
    "                 the reverse: config.json, generation_config.json, model.safetensors (or\n"
    "                 shards and model.safetensors.index.json past the size)\n"
    "  quantize FILE.h5 --bits 8|4 --group-size G --output Q.h5 [--scale-dtype f32|bf16]\n"
    "           [--quantize-head]\n"
    "                 the blocks' weight matrices rounded to int8 (symmetric) or int4 (zero points)\n"
    "                 per group of G input features, for generate; norms, biases, embeddings stay\n"
    "                 f32, the optimizer state is dropped (docs/checkpoints.md)\n"
    "  --version      the version, commit, build options and devices of this build\n";

constexpr const char* kExample =
    "  ckpt_tool inspect runs/ck/step_100.h5\n"
    "  ckpt_tool verify runs/ck/step_100.h5\n"
    "  ckpt_tool import-hf models/tiny-llama --output tiny.h5\n"
    "  ckpt_tool export-hf runs/ck/step_100.h5 --output models/mine --dtype bf16\n"
    "  ckpt_tool quantize runs/ck/step_100.h5 --bits 4 --group-size 64 --output runs/q4.h5";

// A mistake on the command line: cli::run_main reports po::error with exit code 2.
[[noreturn]] void usage_error(const std::string& what) { throw po::error(what); }

// What follows a command name, parsed with the command's options (desc) and one positional
// argument into vm; false when --help was asked for (and printed).
bool parse_command(const std::vector<std::string>& args, const po::options_description& desc,
                   const char* positional_name, po::variables_map& vm) {
  po::positional_options_description positional;
  positional.add(positional_name, 1);
  const po::parsed_options parsed = po::command_line_parser(args).options(desc).positional(positional).run();
  tessera::cli::check_parsed(parsed, tessera::cli::kOnCommandLine);
  po::store(parsed, vm);
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << desc << "\nExample:\n" << kExample << "\n";
    return false;
  }
  po::notify(vm);
  return true;
}

// The FILE argument of a command (and --help).
bool parse_file(const std::string& command, const std::vector<std::string>& args, std::string& file) {
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")("file", po::value(&file)->value_name("FILE"), "the checkpoint (.h5)");
  po::variables_map vm;
  if (!parse_command(args, desc, "file", vm)) return false;
  if (file.empty()) usage_error("ckpt_tool " + command + " needs a checkpoint FILE");
  return true;
}

std::string attr_text(const CheckpointReader& r, const std::string& key) {
  switch (r.attr_type(key)) {
    case CheckpointReader::AttrType::int64: return std::to_string(r.attr_int(key));
    case CheckpointReader::AttrType::float64: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.10g", r.attr_double(key));
      return buf;
    }
    case CheckpointReader::AttrType::string: return r.attr_string(key);
    case CheckpointReader::AttrType::other: return "(a value of another type)";
  }
  return "";
}

// The L2 norm of a whole tensor, accumulated in double, read in slices.
double l2_norm(const CheckpointReader& r, const std::string& name, int64_t numel) {
  constexpr int64_t kSlice = int64_t{1} << 20;
  std::vector<float> buf;
  double sum = 0;
  for (int64_t b = 0; b < numel; b += kSlice) {
    const int64_t e = std::min(numel, b + kSlice);
    buf.resize(static_cast<size_t>(e - b));
    r.read_range(name, b, e, buf.data());
    for (float x : buf) sum += static_cast<double>(x) * x;
  }
  return std::sqrt(sum);
}

int run_inspect(const std::vector<std::string>& args) {
  std::string file;
  if (!parse_file("inspect", args, file)) return 0;
  const CheckpointReader r(file, MPI_COMM_NULL);
  const std::vector<std::string> keys = r.attr_keys();
  auto shown = [&](const std::string& key) { return r.has_attr(key) ? attr_text(r, key) : "(not recorded)"; };
  std::cout << "checkpoint: " << file << "\n"
            << "step: " << shown("step") << "\n"
            << "consumed samples: " << shown("consumed_samples") << "\n"
            << "layout: " << shown("layout") << "\n"
            << "quantisation: "
            << (tessera::quant::is_quantized(r) ? tessera::quant::quantization_text(r) : std::string("none (f32)"))
            << "\n"
            << "attributes (" << keys.size() << "):\n";
  for (const std::string& key : keys) std::cout << "  " << key << " = " << attr_text(r, key) << "\n";

  const std::vector<std::string> names = r.tensors();
  std::vector<tessera::Shape> shapes;
  size_t name_w = 4, shape_w = 5;
  int64_t total = 0;
  for (const std::string& n : names) {
    shapes.push_back(r.shape(n));
    name_w = std::max(name_w, n.size());
    shape_w = std::max(shape_w, shapes.back().str().size());
    total += shapes.back().numel();
  }
  std::cout << "tensors (" << names.size() << ", " << total << " elements):\n";
  std::printf("  %-*s  %-*s  %s\n", static_cast<int>(name_w), "name", static_cast<int>(shape_w), "shape", "l2 norm");
  std::fflush(stdout);
  for (size_t i = 0; i < names.size(); ++i) {
    const tessera::io::TensorType type = r.type(names[i]);
    if (type != tessera::io::TensorType::f32) {  // a quantised checkpoint's values, scales or zero points
      std::printf("  %-*s  %-*s  (%s)\n", static_cast<int>(name_w), names[i].c_str(), static_cast<int>(shape_w),
                  shapes[i].str().c_str(), tessera::io::tensor_type_name(type));
      continue;
    }
    const double norm = l2_norm(r, names[i], shapes[i].numel());
    std::printf("  %-*s  %-*s  %.6g\n", static_cast<int>(name_w), names[i].c_str(), static_cast<int>(shape_w),
                shapes[i].str().c_str(), norm);
  }
  return 0;
}

int run_verify(const std::vector<std::string>& args) {
  std::string file;
  if (!parse_file("verify", args, file)) return 0;
  const CheckpointReader r(file, MPI_COMM_NULL);
  r.verify();
  std::cout << "ok: " << file << " (" << r.tensors().size() << " tensors)\n";
  return 0;
}

// import-hf / export-hf: SOURCE --output TARGET and, for export, --dtype and --max-shard-size.
int run_hf(const std::string& command, const std::vector<std::string>& args) {
  const bool import = command == "import-hf";
  std::string source, output, dtype, shard_size;
  float norm_eps = 0, rope_theta = 0;
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")(
      "source", po::value(&source)->value_name(import ? "DIR" : "FILE.h5"), import ? "the Hugging Face model folder" : "the checkpoint")(
      "output", po::value(&output)->value_name(import ? "FILE.h5" : "DIR"), import ? "the checkpoint to write (must not exist)" : "the folder to write (must not exist or be empty)");
  if (!import)
    desc.add_options()("dtype", po::value(&dtype)->value_name("f32|bf16|f16"), "the tensors' dtype (default: the imported one, else f32)")(
        "max-shard-size", po::value(&shard_size)->value_name("SIZE"), "shard the weights past this size (2GB, 500MB; default: one file)")(
        "norm-eps", po::value(&norm_eps)->value_name("X"), "llama: the RMSNorm epsilon it was trained with (a gpt_train checkpoint does not record it; default 1e-5)")(
        "rope-theta", po::value(&rope_theta)->value_name("X"), "llama: the rotary base it was trained with (not recorded either; default 10000)");
  po::variables_map vm;
  if (!parse_command(args, desc, "source", vm)) return 0;
  if (source.empty()) usage_error("ckpt_tool " + command + " needs " + (import ? "a model folder DIR" : "a checkpoint FILE"));
  if (output.empty()) usage_error("ckpt_tool " + command + " needs --output");
  if (import) {
    const std::string flags = tessera::hf::import_hf(source, output);
    std::cout << "wrote " << output << " (step 0); train from it with\n  gpt_train " << flags
              << " --resume " << output << " --input DATA.h5 ...\n";
  } else {
    TESSERA_CHECK(!vm.count("norm-eps") || norm_eps > 0, "--norm-eps must be > 0, got ", norm_eps);
    TESSERA_CHECK(!vm.count("rope-theta") || rope_theta > 0, "--rope-theta must be > 0, got ", rope_theta);
    tessera::hf::export_hf(source, output,
                           {dtype, shard_size.empty() ? 0 : tessera::io::parse_byte_size(shard_size), norm_eps, rope_theta});
    std::cout << "wrote " << output << "\n";
  }
  return 0;
}

// quantize FILE.h5 --bits 8|4 --group-size G --output Q.h5 [--scale-dtype f32|bf16] [--quantize-head]
int run_quantize(const std::vector<std::string>& args) {
  std::string source, output, scale_dtype = "f32";
  tessera::quant::QuantizeOptions options;
  po::options_description desc("options");
  desc.add_options()("help,h", "show this help")(
      "source", po::value(&source)->value_name("FILE.h5"), "the f32 checkpoint")(
      "output", po::value(&output)->value_name("Q.h5"), "the quantised checkpoint to write (must not exist)")(
      "bits", po::value(&options.bits)->value_name("8|4"), "int8 (symmetric) or int4 (with zero points)")(
      "group-size", po::value(&options.group_size)->value_name("G"), "input features per scale (must divide every block weight's)")(
      "scale-dtype", po::value(&scale_dtype)->value_name("f32|bf16"), "how the scales are stored (default f32)")(
      "quantize-head", po::bool_switch(&options.head), "also the LM head's table (a tied one keeps its f32 copy as the embedding)");
  po::variables_map vm;
  if (!parse_command(args, desc, "source", vm)) return 0;
  if (source.empty()) usage_error("ckpt_tool quantize needs a checkpoint FILE.h5");
  if (output.empty()) usage_error("ckpt_tool quantize needs --output");
  if (!vm.count("bits")) usage_error("ckpt_tool quantize needs --bits 8 or 4");
  if (!vm.count("group-size")) usage_error("ckpt_tool quantize needs --group-size");
  TESSERA_CHECK(scale_dtype == "f32" || scale_dtype == "bf16", "--scale-dtype must be f32 or bf16, not '", scale_dtype, "'");
  options.bf16_scales = scale_dtype == "bf16";
  const tessera::quant::QuantizeSummary s = tessera::quant::quantize_checkpoint(source, output, options);
  std::printf("wrote %s: %lld weight matrices as int%d, group size %lld, %s scales: %.3f MB of f32 weights -> %.3f MB "
              "(%.2fx smaller)\n",
              output.c_str(), static_cast<long long>(s.tensors), options.bits,
              static_cast<long long>(options.group_size), scale_dtype.c_str(), s.weight_bytes_in / 1e6,
              s.weight_bytes_out / 1e6, static_cast<double>(s.weight_bytes_in) / static_cast<double>(s.weight_bytes_out));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tessera::cli::run_main([&] {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) usage_error("missing command (inspect, verify, quantize, import-hf or export-hf)");
    const std::string command = args[0];
    args.erase(args.begin());
    if (command == "--help" || command == "-h" || command == "help") {
      std::cout << kUsage << "\nExample:\n" << kExample << "\n";
      return 0;
    }
    if (command == "--version") {
      std::cout << tessera::cli::version_text("ckpt_tool");
      return 0;
    }
    if (command == "inspect") return run_inspect(args);
    if (command == "verify") return run_verify(args);
    if (command == "import-hf" || command == "export-hf") return run_hf(command, args);
    if (command == "quantize") return run_quantize(args);
    if (!command.empty() && command[0] == '-')
      usage_error("expected a command (inspect, verify, quantize, import-hf or export-hf) before the option '" + command + "'");
    usage_error("unknown command '" + command + "' (expected inspect, verify, quantize, import-hf or export-hf)");
  });
}

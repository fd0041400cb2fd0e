// libFuzzer target: arbitrary bytes as a --config .ini file, parsed by tessera::cli::parse with an
// option set like gpt_train's (in help sections, with a renamed option). Only Boost.Program_options
// / tessera usage errors may come out.
#include <cstdint>
#include <exception>
#include <string>
#include <typeinfo>
#include <vector>

#include "apps/common/cli.h"
#include "core/error.h"
#include "fuzz_common.h"

namespace po = boost::program_options;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = tessera::fuzz::scratch_path("config", ".ini");
  tessera::fuzz::write_bytes(path, data, size);

  // Representative of the apps: required and defaulted values of every type they use, a switch.
  std::string input, metrics, device, resume;
  int layers = 0, hidden = 0, zero = 0, dp = 0;
  int64_t steps = 0, global_batch = 0;
  uint64_t seed = 0;
  float beta1 = 0, grad_clip = 0;
  double lr = 0, bucket_mb = 0;
  tessera::cli::OptionSections sections;
  sections.section(tessera::cli::kTraining).add_options()
      ("input", po::value(&input)->required(), "data set")
      ("val-input", po::value<std::string>(), "validation data set")
      ("layers", po::value(&layers)->default_value(4), "blocks")
      ("hidden", po::value(&hidden)->default_value(128), "hidden size")
      ("steps", po::value(&steps)->default_value(100), "steps")
      ("global-batch", po::value(&global_batch)->default_value(8), "batch")
      ("seed", po::value(&seed)->default_value(1234), "seed")
      ("lr", po::value(&lr)->default_value(1e-3), "learning rate")
      ("beta1", po::value(&beta1)->default_value(0.9f), "AdamW beta1")
      ("grad-clip", po::value(&grad_clip)->default_value(1.0f), "clipping")
      ("bucket-mb", po::value(&bucket_mb)->default_value(25.0), "bucket")
      ("zero", po::value(&zero)->default_value(0), "ZeRO stage")
      ("dp", po::value(&dp)->default_value(0), "data-parallel ranks")
      ("device", po::value(&device)->default_value("cpu"), "device")
      ("resume", po::value(&resume)->default_value("none"), "resume")
      ("metrics", po::value(&metrics), "metrics file")
      ("verbose", po::bool_switch(), "a switch")
      ("recompute-every-k-blocks", po::value<int64_t>()->default_value(1), "renamed from checkpoint-every-k-blocks");
  const std::vector<tessera::cli::RenamedOption> renamed = {{"checkpoint-every-k-blocks", "recompute-every-k-blocks"}};

  std::string a0 = "fuzz_config_file", a1 = "--config", a2 = path;
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  po::variables_map vm;
  try {
    tessera::cli::parse(3, argv, sections, vm, {"fuzz_config_file", "usage: fuzz_config_file", ""}, renamed);
    if (vm.count("val-input")) (void)vm["val-input"].as<std::string>();
    (void)vm["verbose"].as<bool>();
  } catch (const po::error&) {
  } catch (const tessera::Error&) {
  } catch (const std::runtime_error& e) {
    // cli::parse wraps Boost's errors (and an unreadable file) in its own UsageError.
    if (std::string(typeid(e).name()).find("UsageError") == std::string::npos)
      tessera::fuzz::unexpected(e.what());
  } catch (const std::exception& e) {
    tessera::fuzz::unexpected(e.what());
  }
  return 0;
}

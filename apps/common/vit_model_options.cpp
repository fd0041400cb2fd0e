// vit_train's options and its layout checks for the ViT.
#include "apps/common/vit_model_options.h"

#include "core/error.h"
#include "io/hdf5_file.h"

namespace tessera::cli {
namespace po = boost::program_options;

void VitModelOptions::add_to(OptionSections& opts) {
  models::VitConfig& mc = config;
  opts.section(kModel).add_options()
      ("layers", po::value(&mc.layers)->default_value(7)->value_name("N"), "transformer blocks")
      ("hidden", po::value(&mc.hidden)->default_value(256)->value_name("N"), "hidden size")
      ("heads", po::value(&mc.heads)->default_value(4)->value_name("N"), "attention heads (must divide --hidden)")
      ("patch", po::value(&mc.patch)->default_value(4)->value_name("PIXELS"), "patch size in pixels (must divide the image size)")
      ("mlp-ratio", po::value(&mc.mlp_ratio)->default_value(2)->value_name("N"), "MLP hidden size / hidden size")
      ("pool", po::value(&mc.pool)->default_value("cls")->value_name("cls|mean"), "cls (a class token) or mean (the mean over patches)")
      ("label-smoothing", po::value(&mc.label_smoothing)->default_value(0.1f, "0.1")->value_name("X"), "label smoothing of the cross-entropy");
  opts.section(kData).add_options()
      ("input", po::value(&input)->required()->value_name("IMAGES.h5"), "image data set (HDF5: /train and /test images and labels; data_prep cifar10|synth-images)")
      ("crop-pad", po::value(&augment.pad)->default_value(4)->value_name("PIXELS"), "augmentation: random crop from the image zero-padded by this many pixels (0: none; less than the image side)")
      ("no-flip", po::bool_switch(&no_flip), "augmentation: no random horizontal flip");
  opts.section(kTraining).add_options()
      ("epochs", po::value(&epochs)->default_value(0.0, "0")->value_name("X"), "train this many epochs (sets --steps, so not with --steps; 0: use --steps)")
      ("eval-every-epochs", po::value(&eval_every_epochs)->default_value(0.0, "0")->value_name("X"), "evaluate on the test set every N epochs (sets --eval-every, so not with --eval-every; 0: use --eval-every)");
  opts.section(kDebugging).add_options()
      ("benchmark-loader", po::value(&benchmark_loader)->default_value(0)->value_name("N"), "benchmark (N > 0): time N global batches of the augmenting loader alone (its background thread, as training uses it), print images/s and exit");
}

void VitModelOptions::check_layout(const TrainOptions& o) const {
  TESSERA_CHECK(!o.split_gather(), "vit_train: --sp-mode split_gather is not supported for ViT; use --sp with",
                " all_to_all or ring");
  // zigzag balances the causal mask's triangle over the ring; ViT attends to every patch, which
  // the ring already spreads evenly, so zigzag would change nothing but the rows' order.
  TESSERA_CHECK(o.sp_mode != "zigzag", "vit_train: --sp-mode zigzag balances causal (language-model) attention",
                " only; ViT's attention is not causal and --sp-mode ring is balanced for it already: use ring");
  TESSERA_CHECK(!o.auto_placement(), "vit_train: --placement auto needs the memory planner's placement search, which covers",
                " gpt_train and moe_train; use",
                " --offload-optim-frac (static) with --device-memory-limit");
  TESSERA_CHECK(o.mesh.ep == 1, "vit_train: --ep needs mixture-of-experts layers (moe_train has them)");
  config.validate(o.split_model(config.heads, config.hidden));
  o.check_sequence_heads(config.heads);
  TESSERA_CHECK(config.tokens() % o.mesh.sp == 0, "vit: --sp ", o.mesh.sp, " does not divide the ", config.tokens(),
                " tokens of an image (", config.patches(), " patches",
                config.pool == "cls" ? " + the class token; --pool mean has no class token" : "",
                "): sequence parallelism gives each rank an equal share of the tokens");
  const models::ActivationCheckpointing ckpt = o.checkpointing();
  TESSERA_CHECK(ckpt.every >= 1 && (!ckpt.enabled() || ckpt.every <= config.layers), "--recompute-every-k-blocks ",
                ckpt.every, " must be in [1, --layers ", config.layers, "]");
}

plan::VitRun planned_vit_run(const TrainOptions& o, const models::VitConfig& model) {
  plan::VitRun run;
  static_cast<plan::RunLayout&>(run) = planned_layout(o, o.mesh.dp * o.mesh.tp_batch_parts());
  run.model = model;
  return run;
}

void read_image_geometry(const std::string& path, models::VitConfig& config) {
  const io::H5File file = io::H5File::open_read(path);
  TESSERA_CHECK(file.has("/train/images"), path, ": no /train/images (an image data set: data_prep cifar10 or",
                " synth-images)");
  const std::vector<int64_t> shape = file.shape("/train/images");
  TESSERA_CHECK(shape.size() == 4, path, ": /train/images must be [N, H, W, C], got ", shape.size(), " dimensions");
  TESSERA_CHECK(shape[1] == shape[2], "vit_train: images must be square, got ", shape[1], " x ", shape[2]);
  TESSERA_CHECK(file.has_attr("/", "num_classes"), path, ": missing root attribute num_classes");
  config.image = shape[1];
  config.channels = shape[3];
  config.classes = file.attr_int("/", "num_classes");
}

}  // namespace tessera::cli

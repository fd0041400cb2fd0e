// VitModelOptions: vit_train's own options (the model, the image data and its augmentation, the
// run's length in epochs, the loader benchmark) and vit_train's checks of a layout for the ViT,
// declared once for vit_train and for the layout search, which parses vit_train's flags as it does.
#pragma once
#include <cstdint>
#include <string>

#include "apps/common/cli.h"
#include "apps/common/train_cli.h"
#include "io/image_loader.h"
#include "models/vit/vit.h"
#include "plan/vit_memory_plan.h"

namespace tessera::cli {

struct VitModelOptions {
  models::VitConfig config;  // the shape as parsed; the images' geometry comes from the data set
  std::string input;
  double epochs = 0, eval_every_epochs = 0;
  io::ImageAugment augment;
  bool no_flip = false;
  int64_t benchmark_loader = 0;

  // The options, in their --help sections (model, data, training, debugging).
  void add_to(OptionSections& opts);
  // vit_train's checks of the layout (after TrainOptions::finish, with config's image geometry
  // filled in): the modes ViT does not take, an sp that does not divide an image's tokens, the
  // checkpointing's block interval; and the model's own (VitConfig::validate).
  void check_layout(const TrainOptions& o) const;
};

// What the memory planner and the time model need of a vit_train run (plan/vit_memory_plan.h):
// `model` with the images' geometry.
plan::VitRun planned_vit_run(const TrainOptions& o, const models::VitConfig& model);

// The training images' side, channels and classes into `config`, from the data set's header alone
// (/train/images [N, H, W, C], the root's num_classes): what a dry run and the layout search need.
void read_image_geometry(const std::string& path, models::VitConfig& config);

}  // namespace tessera::cli

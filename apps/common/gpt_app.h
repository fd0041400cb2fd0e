// The language-model training apps: gpt_train (dense GPT) and moe_train (a GPT whose every
// --moe-every-th block has a mixture-of-experts feed-forward, with expert parallelism --ep) share
// everything but the MoE options: data, model shape, the training options of train_cli, the
// layouts, the trainer.
#pragma once
#include <cstdint>
#include <string>

#include "apps/common/train_cli.h"
#include "plan/memory_plan.h"

namespace tessera::cli {

enum class GptApp { dense, moe };
int gpt_app_main(int argc, char** argv, GptApp app);

// The training data's vocabulary size alone (all --dry-run reads of it): the vocab_size attribute
// on /train or on the root, where TokenDataset looks.
int64_t vocab_size_of(const std::string& path);
// What the memory planner (and the time model) need of a run, from its checked options.
plan::GptRun planned_run(const TrainOptions& o, const models::GptConfig& model, int64_t seq);

}  // namespace tessera::cli

// The language-model training apps: gpt_train (dense GPT) and moe_train (a GPT whose every
// --moe-every-th block has a mixture-of-experts feed-forward, with expert parallelism --ep) share
// everything but the MoE options: data, model shape, the training options of train_cli, the
// layouts, the trainer.
#pragma once

namespace tessera::cli {

enum class GptApp { dense, moe };
int gpt_app_main(int argc, char** argv, GptApp app);

}  // namespace tessera::cli

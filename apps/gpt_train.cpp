// gpt_train: train a GPT language model on an HDF5 token data set (apps/common/gpt_app.cpp).
#include "apps/common/gpt_app.h"

int main(int argc, char** argv) { return tessera::cli::gpt_app_main(argc, argv, tessera::cli::GptApp::dense); }

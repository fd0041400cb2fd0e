// data_prep's commands, one function each: args are the command's own (after its name); the
// return value is the exit code. Errors throw (UsageError: exit 2; tessera::Error: exit 1).
#pragma once
#include <string>
#include <vector>

namespace data_prep {

int run_text(const std::vector<std::string>& args);             // text_commands.cpp
int run_decode(const std::vector<std::string>& args);           // text_commands.cpp
int run_sft(const std::vector<std::string>& args);              // sft_command.cpp
int run_verify(const std::vector<std::string>& args);           // token_commands.cpp
int run_merge(const std::vector<std::string>& args);            // token_commands.cpp
int run_import_megatron(const std::vector<std::string>& args);  // megatron_command.cpp
int run_synth(const std::vector<std::string>& args);            // synthetic_and_image_commands.cpp
int run_cifar10(const std::vector<std::string>& args);          // synthetic_and_image_commands.cpp
int run_synth_images(const std::vector<std::string>& args);     // synthetic_and_image_commands.cpp

}  // namespace data_prep

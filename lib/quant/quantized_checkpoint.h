// Quantised checkpoints (docs/checkpoints.md, "Quantised checkpoints"): which tensors of a training
// checkpoint are quantised, where their pieces live in the file, how a file says it is quantised,
// and the conversion `ckpt_tool quantize` runs.
#pragma once
#include <cstdint>
#include <string>

#include "core/shape.h"
#include "io/checkpoint_file.h"

namespace tessera::quant {

struct QuantizeOptions {
  int bits = 8;               // 8 (symmetric int8) or 4 (int4 with zero points)
  int64_t group_size = 64;    // columns (input features) per scale
  bool bf16_scales = false;   // scales stored as bf16 (rounded up) instead of f32
  bool head = false;          // also the LM head's table (tied: a quantised copy beside the f32 embedding)
};

// Whether the /params tensor `name` (without the prefix) of that shape is quantised: a 2-D weight
// of a block ("blocks.<i>....weight"), not the MoE router's; with `head`, also the head's table:
// head.weight when the checkpoint has one (untied_head), else the tied embed.tokens.weight.
bool quantized_tensor(const std::string& name, const Shape& shape, bool head, bool untied_head = false);
// Whether the head table `name` is the tied token embedding (kept in f32 beside its quantised copy).
bool tied_head(const std::string& name);

// The datasets of a quantised tensor `name`: /qparams/<name>/q, /scales, /zeros.
std::string quantized_path(const std::string& name, const char* piece);

// Root attribute "quantized" = 1 (written by quantize_checkpoint only).
bool is_quantized(const io::CheckpointReader& reader);
// "int8, group size 64, f32 scales" (and ", head quantised"); "" when not quantised.
std::string quantization_text(const io::CheckpointReader& reader);

struct QuantizeSummary {
  int64_t tensors = 0;          // matrices quantised
  int64_t weight_bytes_in = 0;  // their f32 bytes
  int64_t weight_bytes_out = 0; // their quantised bytes (values, scales, zero points)
};
// Writes the quantised checkpoint `output` (atomically, .tmp then rename) from the training
// checkpoint `input`: every quantized_tensor as /qparams pieces, the other /params in f32, no
// optimizer state, the root attributes copied plus quantized, bits, group_size, scale_dtype,
// quantized_head. Refuses, naming the problem, before writing anything: an existing output, bits
// other than 8 or 4, a group size that is not positive (even, for int4) or does not divide a
// quantised tensor's columns, an input that is already quantised or fails verify().
QuantizeSummary quantize_checkpoint(const std::string& input, const std::string& output, const QuantizeOptions& options);

}  // namespace tessera::quant

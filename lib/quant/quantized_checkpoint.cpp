// quantize_checkpoint and the names of a quantised checkpoint (quantized_checkpoint.h): the input
// is checked whole before the output is created, then written tensor by tensor (.tmp, then rename).
#include "quant/quantized_checkpoint.h"

#include <cstring>
#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "quant/quantized_matrix.h"

namespace tessera::quant {
namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& x) {
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

constexpr const char* kParams = "/params/";

}  // namespace

bool tied_head(const std::string& name) { return name == "embed.tokens.weight"; }

bool quantized_tensor(const std::string& name, const Shape& shape, bool head, bool untied_head) {
  if (shape.rank() != 2) return false;
  if (head && name == "head.weight") return true;
  if (head && tied_head(name)) return !untied_head;  // an untied model's table is its embedding only
  return starts_with(name, "blocks.") && ends_with(name, ".weight") && name.find(".router.") == std::string::npos;
}

std::string quantized_path(const std::string& name, const char* piece) { return "/qparams/" + name + "/" + piece; }

bool is_quantized(const io::CheckpointReader& r) {
  return r.has_attr("quantized") && r.attr_type("quantized") == io::CheckpointReader::AttrType::int64 &&
         r.attr_int("quantized") == 1;
}

std::string quantization_text(const io::CheckpointReader& r) {
  if (!is_quantized(r)) return "";
  std::string text = "int" + std::to_string(r.attr_int("bits")) + ", group size " +
                     std::to_string(r.attr_int("group_size")) + ", " +
                     (r.has_attr("scale_dtype") ? r.attr_string("scale_dtype") : std::string("f32")) + " scales";
  if (r.has_attr("quantized_head") && r.attr_int("quantized_head") == 1) text += ", head quantised";
  return text;
}

QuantizeSummary quantize_checkpoint(const std::string& input, const std::string& output, const QuantizeOptions& o) {
  TESSERA_CHECK(o.bits == 8 || o.bits == 4, "--bits must be 8 or 4, not ", o.bits);
  TESSERA_CHECK(o.group_size > 0, "--group-size must be positive, not ", o.group_size);
  TESSERA_CHECK(o.bits == 8 || o.group_size % 2 == 0, "--group-size ", o.group_size,
                " is odd: int4 packs two columns a byte, so a group must hold an even number");
  TESSERA_CHECK(!std::filesystem::exists(output), "the output ", output,
                " already exists: give a new file (nothing is overwritten)");
  const io::CheckpointReader r(input, MPI_COMM_NULL);
  TESSERA_CHECK(!is_quantized(r), input, " is already quantised (", quantization_text(r),
                "): quantise the f32 checkpoint it came from");
  r.verify();

  // Every tensor to quantise, checked before anything is written.
  std::vector<std::string> params, quantized;
  const bool untied_head = r.has(std::string(kParams) + "head.weight");  // the table is then the embedding only
  for (const std::string& path : r.tensors()) {
    if (!starts_with(path, kParams)) continue;
    const std::string name = path.substr(std::strlen(kParams));
    const Shape shape = r.shape(path);
    params.push_back(name);
    if (!quantized_tensor(name, shape, o.head, untied_head)) continue;
    TESSERA_CHECK(shape[1] % o.group_size == 0, "--group-size ", o.group_size, " does not divide the input dimension ",
                  shape[1], " of ", name, " ", shape.str(), " (choose a divisor of every block weight's columns)");
    quantized.push_back(name);
  }
  TESSERA_CHECK(!quantized.empty(), input, " has no block weight matrices (blocks.<i>...weight, 2-D) to quantise");

  QuantizeSummary summary;
  io::CheckpointWriter w(output, MPI_COMM_NULL);
  for (const std::string& key : r.attr_keys()) {
    if (key == "format" || key == "version" || key == "metadata_checksum") continue;
    switch (r.attr_type(key)) {
      case io::CheckpointReader::AttrType::int64: w.set_attr(key, r.attr_int(key)); break;
      case io::CheckpointReader::AttrType::float64: w.set_attr(key, r.attr_double(key)); break;
      case io::CheckpointReader::AttrType::string: w.set_attr(key, r.attr_string(key)); break;
      case io::CheckpointReader::AttrType::other: break;  // a type tessera never writes
    }
  }
  w.set_attr("quantized", int64_t{1});
  w.set_attr("bits", int64_t{o.bits});
  w.set_attr("group_size", o.group_size);
  w.set_attr("scale_dtype", o.bf16_scales ? "bf16" : "f32");
  w.set_attr("quantized_head", int64_t{o.head ? 1 : 0});
  w.set_attr("quantized_from", std::filesystem::path(input).filename().string());

  std::vector<float> values;
  for (const std::string& name : params) {
    const std::string path = kParams + name;
    const Shape shape = r.shape(path);
    values.resize(static_cast<size_t>(shape.numel()));
    r.read_range(path, 0, shape.numel(), values.data());
    const bool quantize = std::find(quantized.begin(), quantized.end(), name) != quantized.end();
    if (!quantize || tied_head(name)) {  // f32 as it was (a tied head's table is also the embedding)
      w.create(path, shape);
      w.write_range(path, 0, shape.numel(), values.data());
    }
    if (!quantize) continue;
    const QuantizedMatrix m = QuantizedMatrix::quantize(values.data(), shape[0], shape[1], o.group_size, o.bits,
                                                        o.bf16_scales);
    const int64_t groups = shape[1] / o.group_size;
    const std::string q = quantized_path(name, "q"), s = quantized_path(name, "scales");
    if (o.bits == 8) {
      w.create(q, shape, io::TensorType::i8);
      w.write_range(q, 0, shape.numel(), reinterpret_cast<const int8_t*>(m.q().data()));
    } else {
      w.create(q, Shape{shape[0], shape[1] / 2}, io::TensorType::u8);
      w.write_range(q, 0, shape.numel() / 2, m.q().data());
      const std::string z = quantized_path(name, "zeros");
      w.create(z, Shape{shape[0], groups}, io::TensorType::u8);
      w.write_range(z, 0, shape[0] * groups, m.zeros().data());
    }
    if (o.bf16_scales) {  // the scales are bf16 values already (rounded up): their upper bits
      std::vector<uint16_t> bits(m.scales().size());
      for (size_t i = 0; i < bits.size(); ++i) {
        uint32_t b;
        std::memcpy(&b, &m.scales()[i], 4);
        bits[i] = static_cast<uint16_t>(b >> 16);
      }
      w.create(s, Shape{shape[0], groups}, io::TensorType::u16);
      w.write_range(s, 0, shape[0] * groups, bits.data());
    } else {
      w.create(s, Shape{shape[0], groups}, io::TensorType::f32);
      w.write_range(s, 0, shape[0] * groups, m.scales().data());
    }
    summary.tensors += 1;
    summary.weight_bytes_in += shape.numel() * 4;
    summary.weight_bytes_out += static_cast<int64_t>(m.q().size() + m.zeros().size()) +
                                shape[0] * groups * (o.bf16_scales ? 2 : 4);
  }
  w.commit();
  return summary;
}

}  // namespace tessera::quant

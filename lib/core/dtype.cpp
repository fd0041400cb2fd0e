// DType and Device names and sizes.
#include "core/dtype.h"

#include "core/error.h"

namespace tessera {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: case DType::u16: return 2;
    case DType::u8: return 1;
  }
  fail("unknown dtype");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::u16: return "u16";
    case DType::u8: return "u8";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::u16, DType::u8})
    if (name == dtype_name(d)) return d;
  fail("unknown dtype '", name, "' (expected f32, bf16, f16, i32, u16 or u8)");
}

const char* device_name(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  fail("unknown device '", name, "' (expected cpu or cuda)");
}

}  // namespace tessera

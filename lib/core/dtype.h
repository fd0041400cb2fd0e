// Element types and devices a Tensor can hold, with their sizes and names.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera {

enum class DType : uint8_t { f32, bf16, f16, i32, u16, u8 };
enum class Device : uint8_t { cpu, cuda };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
DType parse_dtype(const std::string& name);  // "f32", "bf16", ...; throws on anything else
const char* device_name(Device device);
Device parse_device(const std::string& name);  // "cpu" or "cuda"

// The C++ type behind a DType, for typed access (bf16/f16 are stored as raw uint16_t bits).
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

}  // namespace tessera

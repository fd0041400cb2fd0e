// FNV-1a (64-bit) over bytes: the one hash that names streams (philox.h) and that ranks compare
// to agree on arguments and configurations. Not for security.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera {

class Fnv1a {
 public:
  Fnv1a& add(const void* data, size_t bytes) {
    const auto* b = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) value_ = (value_ ^ b[i]) * 0x100000001b3ull;
    return *this;
  }
  Fnv1a& add(std::string_view s) { return add(s.data(), s.size()); }
  // A value's bytes as the machine stores them (ranks of one job share a byte order).
  template <typename T>
  Fnv1a& add_value(const T& v) { return add(&v, sizeof v); }
  uint64_t value() const { return value_; }

 private:
  uint64_t value_ = 0xcbf29ce484222325ull;  // the 64-bit offset basis
};

}  // namespace tessera

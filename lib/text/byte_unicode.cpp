// The byte-to-unicode table: printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to
// themselves, the other 68 bytes in increasing order to U+0100, U+0101, ...
#include "text/byte_unicode.h"

namespace tessera::text {
namespace {

bool printable(int b) { return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff); }

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {  // the table needs code points below U+0800 only
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

uint32_t code_point_of(int b) {
  if (printable(b)) return static_cast<uint32_t>(b);
  int n = 0;
  for (int c = 0; c < b; ++c)
    if (!printable(c)) ++n;
  return 0x100 + static_cast<uint32_t>(n);
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    for (int b = 0; b < 256; ++b) t[static_cast<size_t>(b)] = utf8(code_point_of(b));
    return t;
  }();
  return table;
}

int unicode_to_byte(uint32_t code_point) {
  static const std::array<int, 0x200> reverse = [] {
    std::array<int, 0x200> r;
    r.fill(-1);
    for (int b = 0; b < 256; ++b) r[code_point_of(b)] = b;
    return r;
  }();
  return code_point < reverse.size() ? reverse[code_point] : -1;
}

}  // namespace tessera::text

// nfc() through utf8proc_map (compose + stable, the length given, so NUL bytes pass), or a refusal
// in a build without libutf8proc.
#include "text/unicode_nfc.h"

#include <cstdlib>
#include <memory>

#include "core/error.h"

#ifdef TESSERA_HAVE_UTF8PROC
#include <utf8proc.h>
#endif

namespace tessera::text {

#ifdef TESSERA_HAVE_UTF8PROC

bool have_nfc() { return true; }

std::string nfc(std::string_view text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0) fail("cannot normalise the text to NFC: ", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

#else

bool have_nfc() { return false; }

std::string nfc(std::string_view) {
  fail("this build has no Unicode normalisation (libutf8proc was not found, or TESSERA_UTF8PROC was OFF, when it",
       " was configured; on Debian: apt-get install libutf8proc-dev, then configure and build again)");
}

#endif

}  // namespace tessera::text

// libFuzzer target for io::TokenDataset::open, structure-aware: the input bytes choose a
// well-formed HDF5 file's layout (split groups or a root /tokens, dtype, rank, shape, the
// vocab_size attribute's presence, type, place and value, the token values), written with H5File,
// then opened for both splits and every token read (reads are streamed: a token outside the
// vocabulary is refused when read). Or the tokens are written as data_prep writes them
// (TokenWriter: chunked, maybe deflated, with /doc_offsets the input chooses, in or out of range).
// Only tessera::Error may come out, and what opens and reads must be valid.
// (Raw bytes would mostly fuzz the HDF5 library's own parser, whose 1.10 bugs on corrupt files are
// outside tessera: see validation/fuzz/README.md.)
#include <cstdint>
#include <exception>

#include "core/error.h"
#include "fuzz_common.h"
#include "io/hdf5_file.h"
#include "io/token_dataset.h"
#include "io/token_writer.h"

namespace {
// Reads the input a byte at a time, 0 once it is used up.
struct Bytes {
  const uint8_t* data;
  size_t size, at = 0;
  uint8_t next() { return at < size ? data[at++] : 0; }
  int64_t next16() { return next() | (static_cast<int64_t>(next()) << 8); }
};

void write_file(const std::string& path, Bytes& in) {
  using tessera::DType;
  auto f = tessera::io::H5File::create(path);
  const uint8_t layout = in.next();
  const std::string group = (layout & 1) ? "/train" : "";
  const DType types[] = {DType::u16, DType::i32, DType::f32, DType::u8};
  const DType dtype = types[in.next() % 4];
  const int rank = (layout & 4) ? 2 : 1;
  const int64_t n = in.next() % 64;
  tessera::Tensor t = tessera::Tensor::zeros(rank == 1 ? tessera::Shape{n} : tessera::Shape{n, 2}, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = static_cast<int64_t>(in.next16()) - 16;  // negatives too
    switch (dtype) {
      case DType::u16: t.data<uint16_t>()[i] = static_cast<uint16_t>(v); break;
      case DType::i32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::f32: t.data<float>()[i] = static_cast<float>(v); break;
      default: t.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    }
  }
  if ((layout & 16) && rank == 1 && !(layout & 8)) {
    // data_prep's way: chunks of 1 to 16 tokens, deflated when bit 5 is set, documents where the
    // input says (TokenWriter keeps them increasing), then maybe a hand-written bad /doc_offsets.
    std::vector<int32_t> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<int32_t>(in.next16()) % 300;
    try {
      tessera::io::TokenWriter w(f, group, 300, 1 + in.next() % 16, (layout & 32) ? 1 + in.next() % 9 : 0);
      for (int64_t i = 0; i < n; ++i) {
        if (in.next() & 1) w.start_document();
        w.append(&values[static_cast<size_t>(i)], 1);
      }
      w.finish();
    } catch (const tessera::Error&) {
      // a negative value: the writer refuses it, as it should
    }
    if (layout & 64) {
      tessera::Tensor o = tessera::Tensor::empty({2}, DType::i32);
      o.data<int32_t>()[0] = static_cast<int32_t>(in.next16()) - 8;
      o.data<int32_t>()[1] = static_cast<int32_t>(in.next16()) - 8;
      f.write("/bad/doc_offsets", o);  // beside no tokens: never read
    }
  } else if (!(layout & 8)) {
    f.write(group + "/tokens", t);
  }
  if (layout & 2) f.write("/val/tokens", t);
  const uint8_t attr = in.next();
  const bool group_exists = !group.empty() && !(layout & 8);
  const std::string where = (attr & 1) && group_exists ? group : "/";
  switch ((attr >> 1) % 4) {
    case 0: break;  // no vocab_size
    case 1: f.set_attr(where, "vocab_size", static_cast<int64_t>(in.next16()) - 8); break;
    case 2: f.set_attr(where, "vocab_size", static_cast<double>(in.next16()) / 3.0); break;
    case 3: f.set_attr(where, "vocab_size", std::string("sixty")); break;
  }
  if (attr & 16) f.set_attr("/", "entropy_rate", static_cast<double>(in.next()) / 7.0);
  if (attr & 32) f.set_attr("/", "tokenizer", std::string(in.next() % 3, 'b'));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = tessera::fuzz::scratch_path("token_dataset", ".h5");
  Bytes in{data, size};
  try {
    write_file(path, in);
  } catch (const tessera::Error& e) {
    tessera::fuzz::unexpected(e.what());  // writing a well-formed file must work
  }
  for (const char* split : {"train", "val"}) {
    try {
      const tessera::io::TokenDataset ds = tessera::io::TokenDataset::open(path, split);
      if (ds.size() <= 0 || ds.vocab_size < 1) tessera::fuzz::unexpected("opened an invalid data set");
      if (ds.bytes_read() != 0) tessera::fuzz::unexpected("opening read tokens");
      for (int32_t token : ds.read(0, ds.size()))
        if (token < 0 || token >= ds.vocab_size) tessera::fuzz::unexpected("a token outside the vocabulary passed");
    } catch (const tessera::Error&) {
      // the expected way to refuse a bad file
    } catch (const std::exception& e) {
      tessera::fuzz::unexpected(e.what());
    }
  }
  return 0;
}

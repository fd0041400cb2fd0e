// Strings as u8 tensors through broadcast and all-gather with counts.
#include "comm/string_exchange.h"

#include <algorithm>

namespace tessera::comm {

std::string broadcast_string(std::string s, Communicator& group, int root) {
  Tensor length = Tensor::empty({1}, DType::i32);
  length.data<int32_t>()[0] = static_cast<int32_t>(s.size());
  group.broadcast(length, root);
  Tensor bytes = Tensor::zeros({length.data<int32_t>()[0]}, DType::u8);
  if (group.rank() == root) std::copy(s.begin(), s.end(), bytes.data<uint8_t>());
  group.broadcast(bytes, root);
  return {reinterpret_cast<const char*>(bytes.data<uint8_t>()), static_cast<size_t>(bytes.numel())};
}

std::vector<std::string> all_gather_strings(const std::string& s, Communicator& group) {
  const int n = group.size();
  Tensor mine = Tensor::empty({1}, DType::i32), lengths = Tensor::empty({n}, DType::i32);
  mine.data<int32_t>()[0] = static_cast<int32_t>(s.size());
  group.all_gather(mine, lengths);
  std::vector<int64_t> counts(lengths.data<int32_t>(), lengths.data<int32_t>() + n);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Tensor input = Tensor::zeros({static_cast<int64_t>(s.size())}, DType::u8);
  std::copy(s.begin(), s.end(), input.data<uint8_t>());
  Tensor all = Tensor::zeros({total}, DType::u8);
  group.all_gather(input, all, counts);
  std::vector<std::string> out;
  const char* at = reinterpret_cast<const char*>(all.data<uint8_t>());
  for (int64_t c : counts) {
    out.emplace_back(at, static_cast<size_t>(c));
    at += c;
  }
  return out;
}

}  // namespace tessera::comm

// Strings between ranks (names, messages, JSON), over a Communicator's collectives: lengths
// first, then the bytes.
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace tessera::comm {

std::string broadcast_string(std::string s, Communicator& group, int root = 0);  // root's s, on every rank
std::vector<std::string> all_gather_strings(const std::string& s, Communicator& group);  // by rank

}  // namespace tessera::comm

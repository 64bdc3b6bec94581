#include "format/checksum.h"

#define XXH_INLINE_ALL
#include <cstdio>
#include <xxhash.h>

namespace recemb::format {

uint64_t checksum(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

struct StreamingChecksum::State {
  XXH3_state_t xxh3;
};

StreamingChecksum::StreamingChecksum() : state_(std::make_unique<State>()) {
  XXH3_64bits_reset(&state_->xxh3);
}

StreamingChecksum::~StreamingChecksum() = default;

void StreamingChecksum::update(std::span<const std::byte> bytes) {
  XXH3_64bits_update(&state_->xxh3, bytes.data(), bytes.size());
}

uint64_t StreamingChecksum::digest() const { return XXH3_64bits_digest(&state_->xxh3); }

std::string checksum_to_hex(uint64_t checksum) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(checksum));
  return text;
}

bool parse_checksum(std::string_view hex, uint64_t& checksum) {
  if (hex.size() != 16) return false;
  uint64_t value = 0;
  for (char c : hex) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return false;
    }
    value = (value << 4) | static_cast<uint64_t>(digit);
  }
  checksum = value;
  return true;
}

}  // namespace recemb::format

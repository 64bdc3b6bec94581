// Checksums of recemb's files: XXH3-64 (xxHash), the one file that includes xxHash. Fast enough to
// verify at memory speed; written in manifests as 16 lowercase hex digits.
#ifndef RECEMB_FORMAT_CHECKSUM_H_
#define RECEMB_FORMAT_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace recemb::format {

// XXH3-64 of `bytes` (seed 0).
uint64_t checksum(std::span<const std::byte> bytes);

// The same checksum computed over data arriving in pieces: update(a); update(b) gives
// checksum(a + b).
class StreamingChecksum {
 public:
  StreamingChecksum();
  ~StreamingChecksum();
  StreamingChecksum(const StreamingChecksum&) = delete;
  StreamingChecksum& operator=(const StreamingChecksum&) = delete;

  void update(std::span<const std::byte> bytes);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// "0123456789abcdef" form, and back; parse_checksum returns false for anything but 16 hex digits.
std::string checksum_to_hex(uint64_t checksum);
bool parse_checksum(std::string_view hex, uint64_t& checksum);

}  // namespace recemb::format

#endif  // RECEMB_FORMAT_CHECKSUM_H_

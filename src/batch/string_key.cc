// The key of a string id (recemb/string_key.h): the checksum of the file formats, XXH3-64 with
// seed 0, so that xxHash stays behind one file (format/checksum.cc).
#include "recemb/string_key.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "format/checksum.h"

namespace recemb {

int64_t string_key(std::string_view id) {
  return static_cast<int64_t>(
      format::checksum(std::as_bytes(std::span<const char>(id.data(), id.size()))));
}

}  // namespace recemb

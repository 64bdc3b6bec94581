#include "testing/gzip_text.h"

#include <stdexcept>
#include <zlib.h>

namespace recemb::test {

std::string gzip_member(const std::string& text) {
  z_stream stream{};
  // windowBits 15 + 16: gzip framing, as gzip(1) writes it.
  if (deflateInit2(&stream, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("gzip_member: deflateInit2 failed");
  }
  std::string out(deflateBound(&stream, text.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int status = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  if (status != Z_STREAM_END) throw std::runtime_error("gzip_member: deflate did not finish");
  return out;
}

}  // namespace recemb::test

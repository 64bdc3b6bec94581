// Text compressed as gzip(1) writes it, for tests of the readers of gzip input.
#ifndef RECEMB_TESTS_TESTING_GZIP_TEXT_H_
#define RECEMB_TESTS_TESTING_GZIP_TEXT_H_

#include <string>

namespace recemb::test {

// `text` as one gzip member (zlib's deflate at level 6 with gzip framing). Concatenated members
// are a valid gzip file, as `cat a.gz b.gz` makes one.
std::string gzip_member(const std::string& text);

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_GZIP_TEXT_H_

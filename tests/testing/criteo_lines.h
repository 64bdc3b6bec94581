// Random lines of Criteo's text format (dlrm/criteo_reader.h), for tests of what reads them.
#ifndef RECEMB_TESTS_TESTING_CRITEO_LINES_H_
#define RECEMB_TESTS_TESTING_CRITEO_LINES_H_

#include <random>
#include <string>
#include <vector>

namespace recemb::test {

// A valid line: a label (unless !with_label: then 39 fields), 13 integers (some empty, negative
// or large) and 26 hexadecimal values of 1 to 16 digits (some empty), tab-separated, no '\n'.
std::string random_criteo_line(std::mt19937_64& random, bool with_label = true);

// `count` such lines, each ended by '\n'.
std::string random_criteo_text(std::mt19937_64& random, int count);

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_CRITEO_LINES_H_

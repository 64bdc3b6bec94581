#include "testing/criteo_lines.h"

#include <cstdint>

namespace recemb::test {

std::string random_criteo_line(std::mt19937_64& random, bool with_label) {
  std::uniform_int_distribution<int> percent(0, 99);
  std::string line;
  if (with_label) line = percent(random) < 25 ? "1" : "0";
  for (int j = 0; j < 13; ++j) {
    if (with_label || j > 0) line += '\t';
    const int kind = percent(random);
    if (kind < 15) continue;  // empty
    line += std::to_string(kind < 25 ? -1 - percent(random) % 2
                           : kind < 30
                               ? std::uniform_int_distribution<int64_t>(0, int64_t{1} << 40)(random)
                               : std::uniform_int_distribution<int64_t>(0, 5000)(random));
  }
  for (int f = 0; f < 26; ++f) {
    line += '\t';
    if (percent(random) < 10) continue;  // missing
    const int digits = percent(random) < 70 ? 8 : 1 + percent(random) % 16;
    for (int d = 0; d < digits; ++d) line += "0123456789abcdef"[percent(random) % 16];
  }
  return line;
}

std::string random_criteo_text(std::mt19937_64& random, int count) {
  std::string text;
  for (int i = 0; i < count; ++i) text += random_criteo_line(random) + "\n";
  return text;
}

}  // namespace recemb::test

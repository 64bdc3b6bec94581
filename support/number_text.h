// The one way recemb turns a number into text for people and for files that must read back
// exactly: the shortest text that reads back as the same float or double ("0.1", "1e-07",
// "3.4028235e+38"; "inf", "-inf", "nan" for the others), as std::to_chars writes it. Used for
// messages, the trainer's records (summary.json, metrics.jsonl, checkpoint metadata), the
// optimizers' descriptions and `recemb predict`'s output. (The serving server's JSON answers use
// a fixed "%.9g" instead: docs/serving.md.)
#ifndef RECEMB_SUPPORT_NUMBER_TEXT_H_
#define RECEMB_SUPPORT_NUMBER_TEXT_H_

#include <charconv>
#include <string>

namespace recemb::support {

inline std::string float_text(float value) {
  char buffer[32];
  return std::string(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
}

inline std::string double_text(double value) {
  char buffer[32];
  return std::string(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
}

}  // namespace recemb::support

#endif  // RECEMB_SUPPORT_NUMBER_TEXT_H_

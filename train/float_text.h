// The shortest text that reads back as the same float or double ("0.1", "1e-07"): how the
// trainer's error messages show values, and how it writes numbers that must read back exactly
// (summary.json, checkpoint metadata).
#ifndef RECEMB_TRAIN_FLOAT_TEXT_H_
#define RECEMB_TRAIN_FLOAT_TEXT_H_

#include <charconv>
#include <string>

namespace recemb::train {

inline std::string float_text(float value) {
  char buffer[32];
  return std::string(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
}

inline std::string double_text(double value) {
  char buffer[32];
  return std::string(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
}

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_FLOAT_TEXT_H_

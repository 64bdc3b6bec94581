// The parse_X half of the public headers' enum<->string scheme: X_name(X) -> std::string_view
// names an enumerator, parse_X(std::string_view) -> X finds it, and an unknown name throws
// InvalidArgument listing the valid ones.
#ifndef RECEMB_UTIL_ENUM_NAMES_H_
#define RECEMB_UTIL_ENUM_NAMES_H_

#include <span>
#include <string>
#include <string_view>

#include "recemb/error.h"

namespace recemb::internal {

// The value of `values` whose name_of is `name` (a copy); else InvalidArgument "unknown <what>
// '<name>'; valid names are '<a>', '<b>', ...".
template <typename Value, typename NameOf>
Value parse_by_name(std::string_view name, std::span<const Value> values, NameOf name_of,
                    std::string_view what) {
  std::string valid_names;
  for (const Value& value : values) {
    if (name_of(value) == name) return value;
    valid_names += (valid_names.empty() ? "'" : ", '") + std::string(name_of(value)) + "'";
  }
  throw InvalidArgument("unknown " + std::string(what) + " '" + std::string(name) +
                        "'; valid names are " + valid_names);
}

}  // namespace recemb::internal

#endif  // RECEMB_UTIL_ENUM_NAMES_H_

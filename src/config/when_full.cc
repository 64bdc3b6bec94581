// The names of WhenFull (recemb/config.h).
#include <span>
#include <string>
#include <string_view>

#include "recemb/config.h"
#include "recemb/error.h"

#include "util/enum_names.h"

namespace recemb {

std::string_view when_full_name(WhenFull value) {
  switch (value) {
    case WhenFull::kEvictLeastRecent:
      return "evict_least_recent";
    case WhenFull::kEvictLeastFrequent:
      return "evict_least_frequent";
    case WhenFull::kError:
      return "error";
  }
  throw InvalidArgument("WhenFull value " + std::to_string(static_cast<int>(value)) +
                        " is not one of kEvictLeastRecent, kEvictLeastFrequent, kError");
}

WhenFull parse_when_full(std::string_view name) {
  constexpr WhenFull kValues[] = {WhenFull::kEvictLeastRecent, WhenFull::kEvictLeastFrequent,
                                  WhenFull::kError};
  return internal::parse_by_name(name, std::span<const WhenFull>(kValues), when_full_name,
                                 "when_full");
}

}  // namespace recemb

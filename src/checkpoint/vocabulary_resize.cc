// The names of VocabularyResize (recemb/checkpoint.h).
#include <span>
#include <string>
#include <string_view>

#include "recemb/checkpoint.h"
#include "recemb/error.h"

#include "util/enum_names.h"

namespace recemb {

std::string_view vocabulary_resize_name(VocabularyResize resize) {
  switch (resize) {
    case VocabularyResize::kError:
      return "error";
    case VocabularyResize::kGrow:
      return "grow";
    case VocabularyResize::kGrowOrShrink:
      return "grow_or_shrink";
  }
  throw InvalidArgument("VocabularyResize value " + std::to_string(static_cast<int>(resize)) +
                        " is not one of kError, kGrow, kGrowOrShrink");
}

VocabularyResize parse_vocabulary_resize(std::string_view name) {
  constexpr VocabularyResize kValues[] = {VocabularyResize::kError, VocabularyResize::kGrow,
                                          VocabularyResize::kGrowOrShrink};
  return internal::parse_by_name(name, std::span<const VocabularyResize>(kValues),
                                 vocabulary_resize_name, "resize");
}

}  // namespace recemb

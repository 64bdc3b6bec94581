#include "recemb/combiner.h"

#include <string>

#include "recemb/error.h"

namespace recemb {

Combiner parse_combiner(std::string_view name) {
  if (name == "sum") return Combiner::kSum;
  if (name == "mean") return Combiner::kMean;
  if (name == "sqrtn") return Combiner::kSqrtn;
  throw InvalidArgument("unknown combiner '" + std::string(name) +
                        "': expected one of 'sum', 'mean', 'sqrtn'");
}

std::string_view combiner_name(Combiner combiner) {
  switch (combiner) {
    case Combiner::kSum:
      return "sum";
    case Combiner::kMean:
      return "mean";
    case Combiner::kSqrtn:
      return "sqrtn";
  }
  return "unknown";
}

}  // namespace recemb

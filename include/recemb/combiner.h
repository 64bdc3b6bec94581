// How the rows of one bag are combined into one activation (TF's TableConfig.combiner).
#ifndef RECEMB_COMBINER_H_
#define RECEMB_COMBINER_H_

#include <string_view>

#include "recemb/export.h"

namespace recemb {

// For a bag with ids i_1..i_k, weights c_1..c_k (all 1 when no weights are given) and rows e_i:
//   S = sum_j c_j * e_{i_j}
//   kSum:   S
//   kMean:  S / sum_j c_j            (zero vector when sum_j c_j == 0)
//   kSqrtn: S / sqrt(sum_j c_j^2)    (zero vector when sum_j c_j^2 == 0)
// An empty bag gives the zero vector for every combiner.
enum class Combiner { kSum, kMean, kSqrtn };

// "sum", "mean" or "sqrtn"; anything else throws InvalidArgument listing the valid names.
RECEMB_EXPORT Combiner parse_combiner(std::string_view name);
RECEMB_EXPORT std::string_view combiner_name(Combiner combiner);

}  // namespace recemb

#endif  // RECEMB_COMBINER_H_

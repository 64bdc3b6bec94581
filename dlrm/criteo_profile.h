// The sizes of the 26 categorical tables of a Criteo model: the published cardinality profiles,
// scaling a profile down to a memory budget, and the presets of `recemb train --preset`.
#ifndef RECEMB_DLRM_CRITEO_PROFILE_H_
#define RECEMB_DLRM_CRITEO_PROFILE_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlrm/example_batch.h"

namespace recemb::dlrm {

// Distinct values of C1..C26 in the Criteo Kaggle Display Advertising Challenge training set
// (45,840,617 examples), as DLRM's and torchrec's Kaggle configurations give them; 33,762,577
// rows in all.
inline constexpr std::array<int64_t, kNumCategoricalFeatures> kCriteoKaggleCardinalities = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572};

// The Criteo 1TB Click Logs (24 days) profile of MLPerf's DLRM-DCNv2 benchmark (torchrec's
// num_embeddings_per_feature): distinct values per feature, the five largest features hashed
// into 40,000,000 rows (max_ind_range); 204,184,588 rows in all.
inline constexpr std::array<int64_t, kNumCategoricalFeatures> kCriteoTerabyteCardinalities = {
    40000000, 39060,    17295,    7424,     20265,  3,     7122, 1543, 63,
    40000000, 3067956,  405282,   10,       2209,   11938, 155,  4,    976,
    14,       40000000, 40000000, 40000000, 590152, 12973, 108,  36};

// "C1".."C26" for feature 0..25 and "I1".."I13" for dense feature 0..12: the names of the Criteo
// columns (and of the trainer's tables).
std::string categorical_feature_name(int feature);
std::string dense_feature_name(int feature);

// Checks that `vocabulary_sizes` holds 26 sizes, each >= 1. Throws InvalidArgument whose message
// starts with `owner` and names the feature and value.
void validate_vocabulary_sizes(std::span<const int64_t> vocabulary_sizes, std::string_view owner);

// Memory for the tables of a model: float32 rows of `dim` values.
struct TableBudget {
  int64_t dim = 16;                       // row width, >= 1
  int64_t max_bytes = int64_t{64} << 20;  // all 26 tables together, bytes (default 64 MiB)
};

// Scales `cardinalities` (26 values >= 1) down to the budget: vocabulary_f = min(card_f, cap) with
// the largest cap >= 1 such that sum_f vocabulary_f * dim * 4 <= max_bytes. Small features keep
// their size; the largest are cut to the same cap (a hashed feature's row count). Returns the
// cardinalities unchanged if they fit.
// Throws InvalidArgument for bad cardinalities, dim < 1, or a budget smaller than one row per
// feature (26 * dim * 4 bytes).
std::vector<int64_t> fit_to_budget(std::span<const int64_t> cardinalities, TableBudget budget);

// The presets of `recemb train --preset`, by name:
//   "small"          the Kaggle profile fitted to 64 MiB at dim 16: 1,048,576 rows, the seven
//                    largest features cut to 129,719 rows, the others at full size. The default:
//                    a run of half a minute or so on two cores.
//   "criteo-kaggle"  kCriteoKaggleCardinalities: the full Kaggle sizes (2.16 GB of tables at dim
//   16). "criteo-1tb"     kCriteoTerabyteCardinalities: MLPerf's 1TB sizes (104.5 GB at dim 128).
inline constexpr std::array<std::string_view, 3> kPresetNames = {"small", "criteo-kaggle",
                                                                 "criteo-1tb"};

// The 26 vocabulary sizes of a preset. Throws InvalidArgument naming `preset` and listing the
// valid names if it is not one of kPresetNames.
std::vector<int64_t> preset_vocabulary_sizes(std::string_view preset);

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_CRITEO_PROFILE_H_

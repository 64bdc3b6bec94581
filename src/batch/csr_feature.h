// One feature's input for one step in the single form the kernels consume: CSR bags.
#ifndef RECEMB_BATCH_CSR_FEATURE_H_
#define RECEMB_BATCH_CSR_FEATURE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "recemb/batch.h"
#include "recemb/config.h"

namespace recemb::support {
class ThreadPool;
}  // namespace recemb::support

namespace recemb::internal {

// Bag b (one output row of dim floats, in row-major activation order) holds
//   ids[offsets[b] .. offsets[b+1])  with weights weights[j] (all 1 when weights is empty)
// and its activation is  bag_scales[b] * sum_j weights[j] * row(ids[j]).
// bag_scales carries the combiner: 1 (sum), 1/sum(w) (mean), 1/sqrt(sum(w^2)) (sqrtn), 0 when that
// denominator is 0; for a sequence feature every (example, position) is its own bag of <= 1 id.
// The gradient gain of id j in bag b is weights[j] * bag_scales[b].
// All ids are validated: 0 <= id < the table's vocabulary_size (any int64 for a dynamic table).
struct CsrFeature {
  std::vector<int64_t> activation_shape;  // output shape + [dim]
  std::vector<int64_t> offsets;           // num_bags + 1 entries, offsets[0] == 0
  std::vector<int64_t> ids;
  std::vector<float> weights;     // empty, or ids.size() entries
  std::vector<float> bag_scales;  // num_bags entries

  int64_t num_bags() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

// Validates `input` against `feature` and its `table` and writes its CSR form to `out`, reusing
// out's capacity (no allocation once the buffers have grown). Throws InvalidArgument naming the
// feature, the example (index, or index tuple for sparse inputs) and the bad value: ids outside
// [0, vocabulary_size), weights whose count differs from the ids' (or non-finite weights when
// validate_weights_and_indices), malformed row_splits / sparse indices / shapes. On a throw, `out`
// holds unspecified contents (callers normalise into staging buffers). With a pool, large
// features that are not sequences have their ids checked and copied on the pool's threads (the
// pool must not be running another loop); the result and the error are the same.
void normalize_feature(const FeatureConfig& feature, const TableConfig& table,
                       const FeatureInput& input, CsrFeature& out,
                       support::ThreadPool* pool = nullptr);

}  // namespace recemb::internal

#endif  // RECEMB_BATCH_CSR_FEATURE_H_

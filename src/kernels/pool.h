// The forward kernel: gather rows of one table and pool them per bag.
#ifndef RECEMB_KERNELS_POOL_H_
#define RECEMB_KERNELS_POOL_H_

#include <cstdint>

#include "recemb/config.h"

namespace recemb::internal {

// One feature's bags over one table, in the CsrFeature layout (batch/csr_feature.h). All pointers
// are borrowed; ids are already validated.
struct PoolInput {
  const float* table = nullptr;  // [vocabulary_size, dim]
  int64_t dim = 0;
  const int64_t* offsets = nullptr;                  // [num_bags + 1]
  const int64_t* ids = nullptr;                      // [offsets[num_bags]]
  const float* weights = nullptr;                    // [offsets[num_bags]], or nullptr for all 1
  const float* bag_scales = nullptr;                 // [num_bags]
  const QuantizationConfig* quantization = nullptr;  // nullptr: rows are used as stored
};

// For b in [first_bag, last_bag):
//   out[b * dim + d] = bag_scales[b] * sum_{j in [offsets[b], offsets[b+1])} weights[j] *
//   q(table[ids[j] * dim + d])
// where q is the simulated quantization (identity without a QuantizationConfig). An empty bag gives
// zeros. Rows are prefetched ahead of use. Never throws, never allocates.
void pool_bags(const PoolInput& input, int64_t first_bag, int64_t last_bag, float* out);

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_POOL_H_

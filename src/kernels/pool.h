// The forward kernel: gather rows of one table and pool them per bag.
#ifndef RECEMB_KERNELS_POOL_H_
#define RECEMB_KERNELS_POOL_H_

#include <cstdint>
#include <variant>

#include "recemb/config.h"

#include "kernels/quantized_rows.h"

namespace recemb::internal {

// A bfloat16 table: [num_rows, dim] bfloat16 bit patterns (kernels/half_precision.h).
struct BFloat16Rows {
  const uint16_t* data = nullptr;
};

// A table's rows in one of its storage formats: float32 ([vocabulary_size, dim] floats), a 16-bit
// training table's bfloat16 or float16 rows, or a serving model's float16 or int8 rows
// (kernels/quantized_rows.h).
using TableRows = std::variant<const float*, Float16Rows, BFloat16Rows, Int8Rows>;

// One feature's bags over one table, in the CsrFeature layout (batch/csr_feature.h). All pointers
// are borrowed; ids are already validated.
struct PoolInput {
  TableRows table = {};
  int64_t dim = 0;
  const int64_t* offsets = nullptr;                  // [num_bags + 1]
  const int64_t* ids = nullptr;                      // [offsets[num_bags]]
  const float* weights = nullptr;                    // [offsets[num_bags]], or nullptr for all 1
  const float* bag_scales = nullptr;                 // [num_bags]
  const QuantizationConfig* quantization = nullptr;  // nullptr: rows are used as stored
};

// For b in [first_bag, last_bag):
//   out[b * dim + d] = bag_scales[b] * sum_{j in [offsets[b], offsets[b+1])} weights[j] *
//   q(row(ids[j])[d])
// where row(i)[d] is the stored value decoded to float (exact for float32, float16 and bfloat16
// rows; code * scale + bias for int8 rows) and q the simulated quantization (identity without a
// QuantizationConfig). The sum runs in j order in float32, whatever the row format: per output
// value, acc = 0.0f, then acc = acc + w * v (a rounded product, never a fused multiply-add; acc + v
// without weights), then acc * scale if the scale is not 1. An empty bag gives +0.0. So results are
// bitwise the same on every SIMD target (kernels/simd_target.h; rows of every format run the
// Highway kernel, simulated quantization a scalar loop) and for float32 training and serving
// tables. Rows are prefetched into the L2 ahead of use (kernels/prefetch.h), the first
// ones on entry. Writes out rows [first_bag, last_bag) only. Never throws, never allocates.
void pool_bags(const PoolInput& input, int64_t first_bag, int64_t last_bag, float* out);

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_POOL_H_

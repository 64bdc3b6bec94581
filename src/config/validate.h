// Validation of a whole Embedding configuration, before anything is allocated.
#ifndef RECEMB_CONFIG_VALIDATE_H_
#define RECEMB_CONFIG_VALIDATE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "recemb/config.h"
#include "recemb/embedding.h"

namespace recemb::internal {

// Throws InvalidArgument naming the table or feature and the field when:
//   - there are no features, or a table or feature name is empty or used twice;
//   - a static table's vocabulary_size or a table's dim is < 1; a dynamic table has a
//     vocabulary_size, a capacity or min_count < 1, a ttl_steps < 1, a when_full that is not a
//     WhenFull value, or an initializer callback;
//   - a table's combiner is not a Combiner value, its
//     quantization_config has num_buckets < 2 or lower >= upper (or non-finite bounds), its
//     optimizer fails validate_optimizer, or its table_rows * dim overflows;
//   - a feature names a table that is not in `tables`, has max_sequence_length < 0, or an
//     output_shape with an entry < 1;
//   - options.num_threads is not in [0, kMaxNumThreads], or not 0 with an executor, whose
//     max_threads() is not in [1, kMaxNumThreads]; or options.optimizer fails validate_optimizer.
void validate_configs(const std::vector<TableConfig>& tables,
                      const std::vector<FeatureConfig>& features, const EmbeddingOptions& options);

// The rows of a table all its parts together: vocabulary_size, or a dynamic table's capacity (the
// slots its keys take).
inline int64_t table_rows(const TableConfig& table) {
  return table.dynamic_vocabulary ? table.dynamic_vocabulary->capacity : table.vocabulary_size;
}

// The optimizer that trains `table`: its own, else the global one (EmbeddingOptions::optimizer);
// none when it has neither (the table is not trainable). The one place that rule is written.
inline const std::optional<Optimizer>& effective_optimizer(
    const TableConfig& table, const std::optional<Optimizer>& global_optimizer) {
  return table.optimizer ? table.optimizer : global_optimizer;
}

}  // namespace recemb::internal

#endif  // RECEMB_CONFIG_VALIDATE_H_

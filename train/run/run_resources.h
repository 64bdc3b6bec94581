// What a `recemb train` run needs of the machine and how it is described: the memory a step
// needs (checked before anything is allocated), the bytes of the tables and slots, the process's
// peak resident size, and how the tables are placed over the ranks.
#ifndef RECEMB_TRAIN_RUN_RUN_RESOURCES_H_
#define RECEMB_TRAIN_RUN_RUN_RESOURCES_H_

#include <cstdint>
#include <string>

#include "recemb/embedding.h"
#include "recemb/placement.h"

#include "train/config/train_config.h"

namespace recemb::train {

// The bytes a run of `config` allocates beyond the tables: a step's buffers (train.batch_size
// examples) and the held-out set (data.eval_examples) (docs/training.md, "Scale").
int64_t run_buffer_bytes(const TrainConfig& config);

// What this process may allocate, and what sets that limit.
struct MemoryLimit {
  int64_t bytes = 0;
  std::string what;  // "the machine's memory" or "this process's address-space limit (ulimit -v)"
};
// The machine's memory, or less under an address-space limit (RLIMIT_AS).
MemoryLimit memory_limit();

// Throws InvalidArgument naming train.batch_size, data.eval_examples, both estimates and the
// limit when run_buffer_bytes(config) exceeds `limit`: before the buffers are allocated.
void check_memory(const TrainConfig& config, const MemoryLimit& limit);

// The bytes of `embedding`'s whole tables and slots, wherever they lie; dynamic tables' at their
// capacity (rows and slots, not the index of their keys).
int64_t embedding_bytes(const Embedding& embedding);

// How many tables follow each strategy, by name: "20 table-wise, 6 row-wise".
std::string strategy_counts(const Placement& placement);

// The peak resident set size of this process so far.
int64_t peak_resident_bytes();

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_RUN_RUN_RESOURCES_H_

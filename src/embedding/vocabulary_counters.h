// What a dynamic table's parts count since construction or restore (behind
// Embedding::vocabulary_stats), apart from the parts themselves: the checkpoint manifest stores
// them without knowing the engine.
#ifndef RECEMB_EMBEDDING_VOCABULARY_COUNTERS_H_
#define RECEMB_EMBEDDING_VOCABULARY_COUNTERS_H_

#include <cstdint>

namespace recemb::internal {

struct VocabularyCounters {
  int64_t inserted = 0;
  int64_t evicted = 0;
  int64_t not_admitted_lookups = 0;  // occurrences in training lookups of keys without a row
};

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_VOCABULARY_COUNTERS_H_

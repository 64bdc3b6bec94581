// What one lookup leaves for its apply_gradients (the state behind a recemb::LookupBatch): the
// normalised features, the requests sent and received, the slots of dynamic keys and their pin,
// and how far a prefetch got. Filled by LookupStage, consumed by ApplyStage.
#ifndef RECEMB_EMBEDDING_BATCH_STATE_H_
#define RECEMB_EMBEDDING_BATCH_STATE_H_

#include <cstdint>
#include <exception>
#include <span>
#include <vector>

#include "recemb/embedding.h"

#include "batch/csr_feature.h"
#include "embedding/dynamic_part.h"
#include "embedding/router.h"

namespace recemb::internal {

struct BatchState {
  uint64_t owner = 0;  // id of the Embedding that filled it; 0: none
  std::vector<CsrFeature> features;
  bool applicable = false;
  // A training lookup (admits and counts keys of dynamic tables), not a pure one.
  bool training = false;
  // The requests this rank sent (sections borrow `features` for local views) and received.
  Requests sent;
  Requests received;
  // [rank][section]: the slots of a dynamic table's keys in a received section (whose ids then
  // point here), and the registration that pins the keys until the batch is applied.
  std::vector<std::vector<std::vector<int64_t>>> key_slots;
  PendingLookup pending;
  // A prefetch (Embedding::prefetch) in progress or done: what it was given, how far it got, and
  // the validation error it met (rethrown by finish_lookup).
  bool prefetched = false;
  bool pooled = false;
  std::vector<FeatureInput> prefetch_inputs;
  std::vector<std::span<float>> prefetch_activations;
  std::exception_ptr prefetch_error;
};

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_BATCH_STATE_H_

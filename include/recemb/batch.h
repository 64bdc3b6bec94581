// Non-owning views of one feature's ids (and optional weights) for one step.
//
// The views borrow the caller's arrays; nothing is copied on the way in. They must stay valid for
// the duration of the call they are passed to (a training lookup copies what apply_gradients needs
// into its LookupBatch).
// All arrays are row-major and contiguous.
#ifndef RECEMB_BATCH_H_
#define RECEMB_BATCH_H_

#include <cstdint>
#include <span>
#include <variant>
#include <vector>

namespace recemb {

// Ids may be int32 or int64; the values must lie in [0, vocabulary_size) of the feature's table,
// or be any value for a dynamic table (config.h, DynamicVocabulary).
using IdSpan = std::variant<std::span<const int32_t>, std::span<const int64_t>>;

// Dense ids of shape `shape`.
//   rank 1 [B]:        one id per example; activation [B, dim].
//   rank r >= 2 [..., N]: the last axis is a bag of N ids; activation shape[:-1] + [dim]
//                      ([B, 1] thus gives TF's result; [B, N] sums N ids as keras-rs does).
// For a sequence feature, rank 2 [B, N] gives [B, L, dim] with position p = column p.
// weights: empty, or one float per id (same shape).
struct DenseIds {
  IdSpan ids = {};
  std::vector<int64_t> shape = {};
  std::span<const float> weights = {};
};

// Ragged ids, TF's RaggedTensor of rank 2: example b holds values[row_splits[b] ..
// row_splits[b+1]). row_splits has B + 1 entries, starts at 0, never decreases and ends at
// values.size(). weights: empty, or one float per value.
struct RaggedIds {
  IdSpan values = {};
  std::variant<std::span<const int32_t>, std::span<const int64_t>> row_splits = {};
  std::span<const float> weights = {};
};

// Sparse COO ids, TF's SparseTensor: indices is [nnz, rank] (rank = dense_shape.size() >= 2),
// values [nnz]. indices[:, :-1] name the bag, indices[:, -1] the position in the bag. Entries must
// be in canonical (row-major, strictly increasing) order and inside dense_shape. The activation is
// dense_shape[:-1] + [dim], or [B, L, dim] for a sequence feature (rank 2 only).
// weights: empty, or one float per value.
struct SparseIds {
  std::span<const int64_t> indices = {};
  IdSpan values = {};
  std::vector<int64_t> dense_shape = {};
  std::span<const float> weights = {};
};

using FeatureInput = std::variant<DenseIds, RaggedIds, SparseIds>;

}  // namespace recemb

#endif  // RECEMB_BATCH_H_

// Owned test inputs for recemb::Embedding and random generators for them.
//
// OwnedInput holds the arrays a FeatureInput borrows (ids as int32 or int64, row splits, sparse
// indices, weights); view() returns the non-owning FeatureInput. Views stay valid while the
// OwnedInput lives and is not modified (moving it keeps the arrays in place).
//
// The random generators take a caller-seeded std::mt19937_64, so every sequence is reproducible
// from the seed the test prints. Random bags deliberately contain the corner cases of the spec:
// empty bags, duplicate ids, zero weights, weights that sum to exactly zero ({w, -w} pairs) and
// negative weights.
#ifndef RECEMB_TESTS_TESTING_RANDOM_BATCHES_H_
#define RECEMB_TESTS_TESTING_RANDOM_BATCHES_H_

#include <cstdint>
#include <random>
#include <vector>

#include "recemb/batch.h"

namespace recemb::test {

enum class IdWidth { kInt32, kInt64 };
enum class Layout { kDense, kRagged, kSparse };

// One bag: its ids and (empty, or one per id) weights.
struct Bag {
  std::vector<int64_t> ids;
  std::vector<float> weights;
};

class OwnedInput {
 public:
  // DenseIds of `shape` (product = ids.size()); weights empty or one per id.
  static OwnedInput dense(const std::vector<int64_t>& ids, std::vector<int64_t> shape,
                          std::vector<float> weights = {}, IdWidth width = IdWidth::kInt64);
  // RaggedIds with one row per bag. Weights are taken from the bags when `weighted`.
  static OwnedInput ragged(const std::vector<Bag>& bags, bool weighted,
                           IdWidth width = IdWidth::kInt64, IdWidth splits_width = IdWidth::kInt64);
  // SparseIds: indices [nnz, rank], values [nnz], weights empty or [nnz].
  static OwnedInput sparse(std::vector<int64_t> indices, const std::vector<int64_t>& values,
                           std::vector<int64_t> dense_shape, std::vector<float> weights = {},
                           IdWidth width = IdWidth::kInt64);
  // DenseIds bag_shape + [N] from bags that all have N ids (N >= 1).
  static OwnedInput dense_from_bags(const std::vector<Bag>& bags, std::vector<int64_t> bag_shape,
                                    bool weighted, IdWidth width = IdWidth::kInt64);
  // SparseIds bag_shape + [last_dim]: bag k (row-major over bag_shape) puts its j-th id at
  // positions[k][j] (strictly increasing, < last_dim).
  static OwnedInput sparse_from_bags(const std::vector<Bag>& bags, std::vector<int64_t> bag_shape,
                                     const std::vector<std::vector<int64_t>>& positions,
                                     int64_t last_dim, bool weighted,
                                     IdWidth width = IdWidth::kInt64);

  FeatureInput view() const;

  // Direct access, to corrupt a valid input in error tests.
  std::vector<int64_t>& ids64() { return ids64_; }
  std::vector<int32_t>& ids32() { return ids32_; }
  std::vector<float>& weights() { return weights_; }
  std::vector<int64_t>& splits64() { return splits64_; }
  std::vector<int64_t>& indices() { return indices_; }
  std::vector<int64_t>& shape() { return shape_; }

 private:
  void set_ids(const std::vector<int64_t>& ids, IdWidth width);
  IdSpan id_span() const;

  Layout layout_ = Layout::kDense;
  IdWidth width_ = IdWidth::kInt64;
  IdWidth splits_width_ = IdWidth::kInt64;
  std::vector<int32_t> ids32_;
  std::vector<int64_t> ids64_;
  std::vector<int32_t> splits32_;
  std::vector<int64_t> splits64_;
  std::vector<int64_t> indices_;
  std::vector<int64_t> shape_;  // dense shape, or sparse dense_shape
  std::vector<float> weights_;
};

// Views of several owned inputs, in order.
std::vector<FeatureInput> views_of(const std::vector<OwnedInput>& inputs);

struct BagOptions {
  int64_t vocabulary_size = 1;
  int64_t min_length = 0;  // inclusive
  int64_t max_length = 4;  // inclusive
  bool weighted = true;
};

// num_bags random bags. Ids are uniform in [0, vocabulary_size) and, with probability 1/4, a repeat
// of an earlier id of the same bag. Weighted bags mostly get weights in [0.25, 2]; some bags get
// all-zero weights, {w, -w} pairs (an exact zero sum), or one small negative weight.
std::vector<Bag> random_bags(std::mt19937_64& rng, int64_t num_bags, const BagOptions& options);

// Strictly increasing positions in [0, last_dim) for each bag (last_dim >= every bag's size), with
// random gaps.
std::vector<std::vector<int64_t>> random_positions(std::mt19937_64& rng,
                                                   const std::vector<Bag>& bags, int64_t last_dim);

// A random [B, N] input in a random layout (dense with a random N, ragged, or sparse with gaps),
// random id width, weighted with probability 1/2. Bags have 0..max_length ids (dense: 1..).
OwnedInput random_two_dim_input(std::mt19937_64& rng, int64_t batch_size, int64_t vocabulary_size,
                                int64_t max_length);

// A random [B] input (dense, one id per example), random id width, weighted with probability 1/2.
OwnedInput random_one_dim_input(std::mt19937_64& rng, int64_t batch_size, int64_t vocabulary_size);

// A random sparse [B, 2, 4] input: 2B bags of 0..3 ids at random positions, random id width,
// weighted with probability 1/2.
OwnedInput random_three_dim_sparse_input(std::mt19937_64& rng, int64_t batch_size,
                                         int64_t vocabulary_size);

// A random dense [B, 2, N] input with a random N in 1..3, random id width, weighted with
// probability 1/2.
OwnedInput random_three_dim_dense_input(std::mt19937_64& rng, int64_t batch_size,
                                        int64_t vocabulary_size);

IdWidth random_width(std::mt19937_64& rng);
bool random_bool(std::mt19937_64& rng);
int64_t random_int(std::mt19937_64& rng, int64_t low, int64_t high);  // inclusive

// `size` gradient values with magnitudes in [0.1, 1] and random signs (never zero).
std::vector<float> random_gradient(std::mt19937_64& rng, size_t size);

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_RANDOM_BATCHES_H_

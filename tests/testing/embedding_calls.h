// An Embedding driven from owned test inputs and read back whole: lookups and training steps from
// OwnedInput (testing/random_batches.h), every variable as a vector, and a snapshot of the whole
// state to show that a rejected call changed nothing.
#ifndef RECEMB_TESTS_TESTING_EMBEDDING_CALLS_H_
#define RECEMB_TESTS_TESTING_EMBEDDING_CALLS_H_

#include <cstdint>
#include <functional>
#include <gtest/gtest.h>
#include <map>
#include <string>
#include <vector>

#include "recemb/embedding.h"

#include "testing/random_batches.h"

namespace recemb::test {

// The number of values of an array of this shape.
int64_t product(const std::vector<int64_t>& shape);

// The whole variable `name` of `table` (read_variable).
std::vector<float> read(const Embedding& layer, const std::string& table, const std::string& name);

// Looks `inputs` up in `layer` and returns each feature's activations: a training lookup into
// `batch`, or (null) a pure lookup.
std::vector<std::vector<float>> look_up(Embedding& layer, const std::vector<OwnedInput>& inputs,
                                        LookupBatch* batch = nullptr);
std::vector<std::vector<float>> look_up(Embedding& layer, const std::vector<OwnedInput>& inputs,
                                        LookupBatch& batch);

// Expects `actual` to hold `expected`, each value within 1e-5: for goldens that are small exact
// numbers, where 1e-5 absorbs the float32 rounding of mean gains (1/3). `what` names the array.
void expect_floats_eq(const std::vector<float>& actual, const std::vector<float>& expected,
                      const std::string& what);

// Applies one gradient per feature to the lookup in `batch`.
void train(Embedding& layer, LookupBatch& batch, const std::vector<std::vector<float>>& gradients);

// Trains steps [first, last) of `layer` on this rank's share of each step's global batch of
// `batch_size` examples, which depends only on the step and `seed` (so any number of ranks trains
// on the same global batches: rank r of W takes examples [r B / W, (r + 1) B / W)): per feature,
// random weighted ragged bags of up to 4 ids in [0, ids_of(its table)), and random gradients.
void train_rank_share(Embedding& layer, int64_t first, int64_t last, int64_t batch_size,
                      uint64_t seed, const std::function<int64_t(const TableConfig&)>& ids_of);

// Every variable of every table, the step and the skipped-row count.
struct Snapshot {
  std::map<std::string, std::vector<float>> variables;  // "table/variable"
  int64_t step = 0;
  int64_t skipped_rows = 0;
};

Snapshot snapshot_of(const Embedding& layer);

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b);

// Success when `layer` still holds `before` bit for bit; otherwise names what changed.
::testing::AssertionResult unchanged(const Snapshot& before, const Embedding& layer);

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_EMBEDDING_CALLS_H_

// recemb::Embedding on bad input and misuse (docs/semantics.md §6): the right exception, a message
// naming the feature, example and value, and no state change; then the rest of the LookupBatch
// contract (batches applied in any order, each at most once, only by the Embedding that filled
// them), against the float64 reference in tests/reference/.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/recemb.h"

#include "reference/reference_embedding.h"
#include "testing/embedding_calls.h"
#include "testing/error_of.h"
#include "testing/random_batches.h"
#include "testing/reference_steps.h"

namespace recemb {
namespace {

using reference::ReferenceEmbedding;
using test::apply_both;
using test::BatchPair;
using test::bitwise_equal;
using test::error_of;
using test::expect_floats_eq;
using test::expect_matches_reference;
using test::IdWidth;
using test::look_up;
using test::lookup_both;
using test::near_reference;
using test::OwnedInput;
using test::product;
using test::read;
using test::Snapshot;
using test::snapshot_of;
using test::train;
using test::unchanged;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Bad input: the right exception, a message naming feature / example / value, no state change.
// A rejected lookup into a batch leaves that batch as it was (its pending lookup still applies
// exactly as the reference), and so does a batch of an earlier valid lookup; a rejected
// apply_gradients leaves its batch applicable, and it then applies exactly as the reference. Then
// the rest of the LookupBatch contract: batches applied in any order, each at most once, only by
// the Embedding that filled them.

class EmbeddingErrorTest : public ::testing::Test {
 protected:
  static constexpr int64_t kBatch = 3;

  static Embedding make_layer(NonFiniteGradients policy = NonFiniteGradients::kReject) {
    return Embedding(
        std::vector<TableConfig>{
            {.name = "items",
             .vocabulary_size = 20,
             .dim = 4,
             .optimizer = Adagrad{.learning_rate = 0.2f},
             .combiner = Combiner::kMean},
            {.name = "users", .vocabulary_size = 10, .dim = 2, .combiner = Combiner::kSqrtn}},
        std::vector<FeatureConfig>{{.name = "clicks", .table = "items"},
                                   {.name = "views", .table = "items"},
                                   {.name = "friends", .table = "users"},
                                   {.name = "history", .table = "items", .max_sequence_length = 2}},
        EmbeddingOptions{.optimizer = Adam{.learning_rate = 0.05f},
                         .num_threads = 2,
                         .seed = 5,
                         .non_finite_gradients = policy});
  }

  void build(NonFiniteGradients policy = NonFiniteGradients::kReject) {
    layer_.emplace(make_layer(policy));
    reference_.emplace(ReferenceEmbedding::like(*layer_));
  }

  // clicks: ragged {1, 5, 5} {} {7, 19}, weighted; views: dense [3] int32; friends: sparse [3, 4]
  // with example 2 empty, weighted; history: ragged sequence {3, 4, 5} {6} {} (truncated at 2).
  static std::vector<OwnedInput> valid_inputs() {
    std::vector<OwnedInput> inputs;
    inputs.push_back(OwnedInput::ragged(
        {{{1, 5, 5}, {1.0f, 0.5f, 2.0f}}, {{}, {}}, {{7, 19}, {1.0f, 1.0f}}}, true));
    inputs.push_back(OwnedInput::dense({2, 0, 19}, {kBatch}, {}, IdWidth::kInt32));
    inputs.push_back(
        OwnedInput::sparse({0, 0, 0, 2, 1, 1}, {4, 9, 0}, {kBatch, 4}, {1.0f, 2.0f, 0.5f}));
    inputs.push_back(
        OwnedInput::ragged({{{3, 4, 5}, {}}, {{6}, {}}, {{}, {}}}, false, IdWidth::kInt32));
    return inputs;
  }

  // The shapes of valid_inputs() with other ids, many of them rows of valid_inputs() too.
  static std::vector<OwnedInput> other_inputs() {
    std::vector<OwnedInput> inputs = valid_inputs();
    inputs[0].ids64() = {5, 1, 2, 7, 7};
    inputs[1].ids32() = {8, 0, 2};
    inputs[2].ids64() = {4, 1, 9};
    inputs[3].ids32() = {4, 3, 6, 5};
    return inputs;
  }

  // Zero examples in every layout.
  static std::vector<OwnedInput> empty_inputs() {
    std::vector<OwnedInput> inputs;
    inputs.push_back(OwnedInput::ragged({}, true));
    inputs.push_back(OwnedInput::dense({}, {0}, {}, IdWidth::kInt32));
    inputs.push_back(OwnedInput::sparse({}, {}, {0, 4}, {}));
    inputs.push_back(OwnedInput::ragged({}, false, IdWidth::kInt32, IdWidth::kInt32));
    return inputs;
  }

  static std::vector<std::vector<float>> valid_gradients(uint64_t seed) {
    std::mt19937_64 rng(seed);
    return {test::random_gradient(rng, kBatch * 4), test::random_gradient(rng, kBatch * 4),
            test::random_gradient(rng, kBatch * 2), test::random_gradient(rng, kBatch * 2 * 4)};
  }

  void lookup_valid(BatchPair& batch) { lookup_both(*layer_, *reference_, valid_inputs(), batch); }
  void lookup_other(BatchPair& batch) { lookup_both(*layer_, *reference_, other_inputs(), batch); }
  void apply_valid(BatchPair& batch, uint64_t seed = 1) {
    apply_both(*layer_, *reference_, batch, valid_gradients(seed));
    expect_matches_reference(*layer_, *reference_);
  }

  // Applying `batch` to `layer` throws FailedPrecondition mentioning the lookup; nothing changes,
  // and the batch stays applicable or not as it was.
  static void expect_not_applicable(Embedding& layer, LookupBatch& batch) {
    const Snapshot before = snapshot_of(layer);
    const bool was_applicable = batch.applicable();
    EXPECT_THAT(error_of<FailedPrecondition>([&] { train(layer, batch, valid_gradients(1)); }),
                HasSubstr("lookup"));
    EXPECT_TRUE(unchanged(before, layer));
    EXPECT_EQ(batch.applicable(), was_applicable);
  }

  // Activations sized for `inputs` by the reference (so a bad size can be injected).
  std::vector<std::vector<float>> buffers(const std::vector<FeatureInput>& views) {
    std::vector<std::vector<float>> result;
    for (size_t f = 0; f < views.size() && f < layer_->features().size(); ++f) {
      result.emplace_back(static_cast<size_t>(product(reference_->activation_shape(f, views[f]))));
    }
    return result;
  }

  // `views` into `spans` must be rejected with InvalidArgument containing every fragment, the
  // same by the pure lookup and by a lookup into `target` (which holds a valid lookup before):
  // tables, slots and step are unchanged, and `target` still holds its valid lookup.
  void expect_both_lookups_rejected(const std::vector<FeatureInput>& views,
                                    const std::vector<std::span<float>>& spans, BatchPair& target,
                                    const std::vector<std::string>& fragments) {
    ASSERT_TRUE(target.layer.applicable());
    const Snapshot before = snapshot_of(*layer_);
    const std::string pure = error_of<InvalidArgument>([&] { layer_->lookup(views, spans); });
    EXPECT_TRUE(unchanged(before, *layer_)) << "pure lookup";
    const std::string training =
        error_of<InvalidArgument>([&] { layer_->lookup(views, spans, target.layer); });
    EXPECT_TRUE(unchanged(before, *layer_)) << "lookup into a batch";
    EXPECT_TRUE(target.layer.applicable()) << "a rejected lookup leaves its batch as it was";
    for (const std::string* message : {&pure, &training}) {
      for (const std::string& fragment : fragments) {
        EXPECT_THAT(lowercase(*message), HasSubstr(lowercase(fragment)));
      }
    }
    EXPECT_EQ(training, pure);
  }

  // While two valid lookups are outstanding, `bad` (a modified copy of the valid inputs) is
  // rejected (see expect_both_lookups_rejected) into the second one's batch; both then apply
  // exactly as the reference (the second one its earlier, valid lookup), and the batch can be
  // looked up into again.
  void expect_lookup_rejected(const std::vector<OwnedInput>& bad,
                              const std::vector<std::string>& fragments) {
    build();
    BatchPair earlier;
    lookup_valid(earlier);
    BatchPair target;
    lookup_other(target);
    // Buffers of the valid sizes, so only the input itself is wrong.
    std::vector<std::vector<float>> activations = buffers(test::views_of(valid_inputs()));
    const std::vector<std::span<float>> spans(activations.begin(), activations.end());
    expect_both_lookups_rejected(test::views_of(bad), spans, target, fragments);
    EXPECT_TRUE(earlier.layer.applicable());
    apply_valid(earlier);
    apply_valid(target, 2);
    lookup_valid(target);
    apply_valid(target, 3);
  }

  // While two valid lookups are outstanding, applying `bad` to the first one is rejected with
  // InvalidArgument containing every fragment; nothing changes, both batches stay applicable and
  // then apply exactly as the reference.
  void expect_apply_rejected(const std::vector<std::vector<float>>& bad,
                             const std::vector<std::string>& fragments) {
    build();
    BatchPair batch;
    lookup_valid(batch);
    BatchPair other;
    lookup_other(other);
    const Snapshot before = snapshot_of(*layer_);
    const std::string message =
        error_of<InvalidArgument>([&] { train(*layer_, batch.layer, bad); });
    for (const std::string& fragment : fragments) {
      EXPECT_THAT(lowercase(message), HasSubstr(lowercase(fragment)));
    }
    EXPECT_TRUE(unchanged(before, *layer_));
    EXPECT_TRUE(batch.layer.applicable()) << "a rejected apply leaves its batch applicable";
    EXPECT_TRUE(other.layer.applicable());
    apply_valid(batch);
    apply_valid(other, 2);
  }

  std::optional<Embedding> layer_;
  std::optional<ReferenceEmbedding> reference_;
};

TEST_F(EmbeddingErrorTest, ValidStepsMatchReference) {
  build();
  BatchPair batch;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    lookup_valid(batch);
    apply_valid(batch, seed);
  }
}

TEST_F(EmbeddingErrorTest, OutOfRangeId) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[0].ids64()[4] = 20;  // clicks, example 2, vocabulary 20
  expect_lookup_rejected(bad, {"'clicks'", "example 2", "20"});
}

TEST_F(EmbeddingErrorTest, OutOfRangeInt32Id) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[1].ids32()[1] = 1000;  // views, example 1
  expect_lookup_rejected(bad, {"'views'", "example 1", "1000"});
}

TEST_F(EmbeddingErrorTest, NegativeId) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[2].ids64()[2] = -3;  // friends, example 1 (sparse: named by its index [1, 1])
  expect_lookup_rejected(bad, {"'friends'", "[1, 1]", "-3"});
}

TEST_F(EmbeddingErrorTest, NegativeIdInSequence) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[3].ids32()[3] = -7;  // history, example 1
  expect_lookup_rejected(bad, {"'history'", "example 1", "-7"});
}

TEST_F(EmbeddingErrorTest, WeightsCountMismatch) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[0].weights().pop_back();  // clicks: 5 ids, 4 weights
  expect_lookup_rejected(bad, {"'clicks'", "weights", "4", "5"});
}

TEST_F(EmbeddingErrorTest, NonFiniteWeight) {
  for (float value : {kNaN, kInf, -kInf}) {
    std::vector<OwnedInput> bad = valid_inputs();
    bad[2].weights()[2] = value;  // friends, example 1 (sparse: named by its index [1, 1])
    expect_lookup_rejected(bad, {"'friends'", "[1, 1]", std::isnan(value) ? "nan" : "inf"});
  }
}

TEST_F(EmbeddingErrorTest, RaggedRowSplitsNotEndingAtValues) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[0].splits64().back() = 4;  // 5 values
  expect_lookup_rejected(bad, {"'clicks'"});
}

TEST_F(EmbeddingErrorTest, SparseIndexOutsideDenseShape) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[2].indices()[3] = 4;  // position 4 of dense_shape [3, 4]
  expect_lookup_rejected(bad, {"'friends'"});
}

TEST_F(EmbeddingErrorTest, SparseIndicesNotCanonical) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[2].indices()[3] = 0;  // (0, 2) -> (0, 0): a repeat of the first entry
  expect_lookup_rejected(bad, {"'friends'"});
}

TEST_F(EmbeddingErrorTest, DenseShapeNotMatchingIds) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[1].shape() = {4};  // 3 ids
  expect_lookup_rejected(bad, {"'views'"});
}

TEST_F(EmbeddingErrorTest, WrongNumberOfInputs) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad.pop_back();
  build();
  BatchPair earlier;
  lookup_valid(earlier);
  BatchPair target;
  lookup_other(target);
  std::vector<std::vector<float>> activations = buffers(test::views_of(valid_inputs()));
  const std::vector<std::span<float>> spans(activations.begin(), activations.end());
  expect_both_lookups_rejected(test::views_of(bad), spans, target, {"3", "4"});
  apply_valid(earlier);
}

TEST_F(EmbeddingErrorTest, WrongActivationBufferSize) {
  build();
  BatchPair earlier;
  lookup_valid(earlier);
  BatchPair target;
  lookup_other(target);
  const std::vector<OwnedInput> inputs = valid_inputs();
  const std::vector<FeatureInput> views = test::views_of(inputs);
  std::vector<std::vector<float>> activations = buffers(views);
  activations[2].pop_back();  // friends: [3, 2] needs 6
  std::vector<std::span<float>> spans(activations.begin(), activations.end());
  expect_both_lookups_rejected(views, spans, target, {"'friends'", "5", "6"});
  lookup_other(target);
  spans.pop_back();  // wrong number of buffers
  expect_both_lookups_rejected(views, spans, target, {});
  apply_valid(earlier);
}

TEST_F(EmbeddingErrorTest, WrongGradientSize) {
  std::vector<std::vector<float>> bad = valid_gradients(1);
  bad[3].push_back(0.5f);  // history: [3, 2, 4] = 24
  expect_apply_rejected(bad, {"'history'", "25", "24"});
}

TEST_F(EmbeddingErrorTest, WrongNumberOfGradients) {
  std::vector<std::vector<float>> bad = valid_gradients(1);
  bad.pop_back();
  expect_apply_rejected(bad, {"3", "4"});
}

TEST_F(EmbeddingErrorTest, NonFiniteGradientRejected) {
  for (float value : {kNaN, kInf, -kInf}) {
    std::vector<std::vector<float>> bad = valid_gradients(1);
    bad[0][2 * 4 + 1] = value;  // clicks, example 2
    expect_apply_rejected(bad, {"'clicks'", "example 2", std::isnan(value) ? "nan" : "inf"});
  }
}

TEST_F(EmbeddingErrorTest, ApplyWithoutLookup) {
  build();
  const Snapshot before = snapshot_of(*layer_);
  BatchPair batch;  // never looked up into
  EXPECT_FALSE(batch.layer.applicable());
  expect_not_applicable(*layer_, batch.layer);
  // A rejected lookup does not make it applicable either.
  std::vector<OwnedInput> bad = valid_inputs();
  bad[1].ids32()[0] = -1;
  std::vector<std::vector<float>> activations = buffers(test::views_of(valid_inputs()));
  std::vector<std::span<float>> spans(activations.begin(), activations.end());
  error_of<InvalidArgument>([&] { layer_->lookup(test::views_of(bad), spans, batch.layer); });
  EXPECT_FALSE(batch.layer.applicable());
  expect_not_applicable(*layer_, batch.layer);
  EXPECT_TRUE(unchanged(before, *layer_));
  lookup_valid(batch);
  apply_valid(batch);
}

TEST_F(EmbeddingErrorTest, SecondApplyOfTheSameBatch) {
  build();
  BatchPair batch;
  lookup_valid(batch);
  apply_valid(batch);
  EXPECT_FALSE(batch.layer.applicable());
  expect_not_applicable(*layer_, batch.layer);
  lookup_valid(batch);
  apply_valid(batch, 3);
}

TEST_F(EmbeddingErrorTest, SecondLookupIntoABatchReplacesItsLookup) {
  build();
  BatchPair batch;
  lookup_other(batch);
  lookup_valid(batch);  // replaces the first lookup
  apply_valid(batch);
  expect_not_applicable(*layer_, batch.layer);  // the replaced lookup is gone, not queued
}

TEST_F(EmbeddingErrorTest, BatchesAppliedInReverseOrderMatchReference) {
  build();
  BatchPair first;
  lookup_valid(first);
  BatchPair second;
  lookup_other(second);
  // The reference applying them in lookup order instead, to show that the order matters here.
  ReferenceEmbedding in_lookup_order = *reference_;
  ReferenceEmbedding::Batch first_copy = first.reference;
  ReferenceEmbedding::Batch second_copy = second.reference;
  apply_valid(second, 2);
  apply_valid(first, 1);
  const std::vector<std::vector<float>> gradients_1 = valid_gradients(1);
  const std::vector<std::vector<float>> gradients_2 = valid_gradients(2);
  in_lookup_order.apply_gradients(
      first_copy, std::vector<std::span<const float>>(gradients_1.begin(), gradients_1.end()));
  in_lookup_order.apply_gradients(
      second_copy, std::vector<std::span<const float>>(gradients_2.begin(), gradients_2.end()));
  EXPECT_FALSE(near_reference(read(*layer_, "items", "parameters"),
                              in_lookup_order.variable("items", "parameters")))
      << "applying in the other order gives the same tables, so this test proves nothing";
}

TEST_F(EmbeddingErrorTest, BatchOfAnotherEmbeddingIsRejected) {
  build();
  // The same configs and seed: the batch fits it, it just is not its own.
  Embedding other_layer = make_layer();
  const Snapshot other_before = snapshot_of(other_layer);
  BatchPair batch;
  lookup_valid(batch);
  expect_not_applicable(other_layer, batch.layer);
  EXPECT_TRUE(unchanged(other_before, other_layer));
  EXPECT_TRUE(batch.layer.applicable());
  apply_valid(batch);  // its own layer still applies it, exactly as the reference
  // A lookup into a batch makes it belong to the layer that looked up.
  BatchPair reused;
  lookup_valid(reused);
  look_up(other_layer, valid_inputs(), reused.layer);
  expect_not_applicable(*layer_, reused.layer);
  train(other_layer, reused.layer, valid_gradients(1));
  EXPECT_FALSE(reused.layer.applicable());
  // The same lookup and gradients from the same state: bitwise what layer_ computed.
  EXPECT_TRUE(unchanged(snapshot_of(*layer_), other_layer));
}

TEST_F(EmbeddingErrorTest, MovedFromBatchIsRejected) {
  build();
  BatchPair batch;
  lookup_valid(batch);
  LookupBatch moved(std::move(batch.layer));
  EXPECT_TRUE(moved.applicable());
  EXPECT_FALSE(batch.layer.applicable());
  expect_not_applicable(*layer_, batch.layer);
  LookupBatch assigned;
  assigned = std::move(moved);
  EXPECT_TRUE(assigned.applicable());
  EXPECT_FALSE(moved.applicable());
  expect_not_applicable(*layer_, moved);
  batch.layer = std::move(assigned);  // back into the first moved-from batch
  apply_valid(batch);                 // the lookup moved along: exactly as the reference
  expect_not_applicable(*layer_, assigned);
  // A moved-from batch can be looked up into again.
  BatchPair again;
  LookupBatch taken(std::move(again.layer));
  lookup_valid(again);
  apply_valid(again, 2);
  EXPECT_FALSE(taken.applicable());
}

TEST_F(EmbeddingErrorTest, PureLookupBetweenLookupAndApplyChangesNothing) {
  build();
  BatchPair batch;
  lookup_valid(batch);
  const Snapshot before = snapshot_of(*layer_);
  // Pure lookups of other ids and of other shapes while `batch` is outstanding.
  lookup_both(*layer_, *reference_, other_inputs());
  lookup_both(*layer_, *reference_, empty_inputs());
  EXPECT_TRUE(unchanged(before, *layer_));
  EXPECT_TRUE(batch.layer.applicable());
  LookupBatch fresh;
  expect_not_applicable(*layer_, fresh);  // a pure lookup records nothing
  apply_valid(batch);
  // Bitwise the same as the same step without the pure lookups.
  Embedding plain = make_layer();
  LookupBatch plain_batch;
  look_up(plain, valid_inputs(), plain_batch);
  train(plain, plain_batch, valid_gradients(1));
  EXPECT_TRUE(unchanged(snapshot_of(plain), *layer_));
}

TEST_F(EmbeddingErrorTest, InputArraysMayBeReleasedAfterTheLookup) {
  build();
  BatchPair batch;
  {
    std::vector<OwnedInput> inputs = valid_inputs();
    lookup_both(*layer_, *reference_, inputs, batch);
    // Overwrite the arrays the lookup read (in place: same sizes), then free them.
    inputs[0].ids64() = {0, 0, 0, 0, 0};
    inputs[0].weights() = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    inputs[1].ids32() = {0, 0, 0};
    inputs[2].ids64() = {0, 0, 0};
    inputs[3].ids32() = {0, 0, 0, 0};
  }
  apply_valid(batch);
}

TEST_F(EmbeddingErrorTest, MovedLayerKeepsItsStateAndOutstandingBatches) {
  build();
  BatchPair batch;
  lookup_valid(batch);
  BatchPair other;
  lookup_other(other);
  Embedding moved = std::move(*layer_);
  layer_.emplace(std::move(moved));
  apply_valid(other, 2);
  apply_valid(batch);
  lookup_valid(batch);
  apply_valid(batch, 4);
}

// A batch of a destroyed Embedding must be refused by a new Embedding even when the new one's state
// is allocated at the same address (typical after free; AddressSanitizer's quarantine delays such
// reuse, so this matters in the plain build).
TEST_F(EmbeddingErrorTest, BatchOfADestroyedEmbeddingIsRejected) {
  build();
  BatchPair batch;
  lookup_valid(batch);
  layer_.reset();
  build();
  expect_not_applicable(*layer_, batch.layer);
}

TEST_F(EmbeddingErrorTest, EmptyBatch) {
  // Zero examples in every layout: activations of size 0, nothing touched, the step still counts.
  build();
  BatchPair batch;
  const auto activations = lookup_both(*layer_, *reference_, empty_inputs(), batch);
  for (const auto& activation : activations) EXPECT_TRUE(activation.empty());
  apply_both(*layer_, *reference_, batch, {{}, {}, {}, {}});
  expect_matches_reference(*layer_, *reference_);
}

TEST_F(EmbeddingErrorTest, SkipRowsLeavesNonFiniteRowsAndUpdatesTheRest) {
  build(NonFiniteGradients::kSkipRows);
  BatchPair batch;
  lookup_valid(batch);
  const Snapshot before = snapshot_of(*layer_);
  std::vector<std::vector<float>> gradients = valid_gradients(1);
  gradients[0][0 * 4 + 1] = kNaN;  // clicks example 0: items rows 1 and 5
  gradients[2][1 * 2 + 0] = kInf;  // friends example 1: users row 0
  apply_both(*layer_, *reference_, batch, gradients);
  expect_matches_reference(*layer_, *reference_);
  EXPECT_EQ(layer_->skipped_rows(), 3);
  EXPECT_EQ(layer_->step(), 1);
  const Snapshot after = snapshot_of(*layer_);
  auto row = [](const std::vector<float>& values, size_t r, size_t dim) {
    return std::vector<float>(values.begin() + static_cast<std::ptrdiff_t>(r * dim),
                              values.begin() + static_cast<std::ptrdiff_t>((r + 1) * dim));
  };
  for (const std::string name : {"items/parameters", "items/accumulators"}) {
    for (size_t r : {1, 5}) {
      EXPECT_TRUE(
          bitwise_equal(row(after.variables.at(name), r, 4), row(before.variables.at(name), r, 4)))
          << name << " row " << r;
    }
    EXPECT_FALSE(
        bitwise_equal(row(after.variables.at(name), 7, 4), row(before.variables.at(name), 7, 4)))
        << name << " row 7 should be updated";
  }
  for (const std::string name : {"users/parameters", "users/momenta", "users/velocities"}) {
    EXPECT_TRUE(
        bitwise_equal(row(after.variables.at(name), 0, 2), row(before.variables.at(name), 0, 2)))
        << name;
    EXPECT_FALSE(
        bitwise_equal(row(after.variables.at(name), 4, 2), row(before.variables.at(name), 4, 2)))
        << name << " row 4 should be updated";
  }
  lookup_valid(batch);
  apply_valid(batch, 2);
}

TEST(EmbeddingNoOptimizer, ServingTablesLookUpButCannotTrain) {
  Embedding layer({{.name = "frozen", .vocabulary_size = 6, .dim = 2, .initializer = RowId{}},
                   {.name = "trained",
                    .vocabulary_size = 6,
                    .dim = 2,
                    .optimizer = Sgd{.learning_rate = 0.1f}}},
                  {{.name = "a", .table = "trained"}, {.name = "b", .table = "frozen"}});
  EXPECT_EQ(layer.variable_names("frozen"), (std::vector<std::string>{"parameters"}));
  std::vector<OwnedInput> inputs;
  inputs.push_back(OwnedInput::dense({1, 2}, {2}));
  inputs.push_back(OwnedInput::dense({4, 5}, {2}));
  LookupBatch batch;
  const auto activations = look_up(layer, inputs, batch);
  expect_floats_eq(activations[1], {4, 4, 5, 5}, "frozen rows");
  const Snapshot before = snapshot_of(layer);
  const std::string message = error_of<FailedPrecondition>([&] {
    train(layer, batch, {std::vector<float>(4, 1.0f), std::vector<float>(4, 1.0f)});
  });
  EXPECT_THAT(message, HasSubstr("frozen"));
  EXPECT_TRUE(unchanged(before, layer));
  EXPECT_TRUE(batch.applicable());
}

// No ids at all, but a batch of 2^62 or 2^40 examples: its activations would have more values than
// an int64 counts (the product wrapped to 0, so an empty buffer passed), or take 16 TiB. The buffer
// is checked before the batch is normalised: nothing of the batch's size is allocated first (which
// failed with std::length_error or std::bad_alloc, naming nothing).
TEST(EmbeddingHugeBatch, IsRefusedByTheActivationCheckBeforeAnythingIsSized) {
  Embedding layer({{.name = "t", .vocabulary_size = 10, .dim = 4, .optimizer = Sgd{}}},
                  {{.name = "clicks", .table = "t"}});
  const std::vector<int64_t> no_ids;
  std::vector<float> buffer(8);
  for (const size_t size : {size_t{0}, size_t{8}}) {
    const std::vector<std::span<float>> activations = {std::span<float>(buffer).first(size)};
    for (const int64_t examples : {int64_t{1} << 62, (int64_t{1} << 62) + 2}) {
      const std::vector<FeatureInput> inputs = {DenseIds{.ids = no_ids, .shape = {examples, 0}}};
      LookupBatch batch;
      EXPECT_EQ(error_of<InvalidArgument>([&] { layer.lookup(inputs, activations, batch); }),
                "feature 'clicks': activation shape [" + std::to_string(examples) +
                    ", 4] has more values than an int64 counts; give fewer examples");
    }
    const std::vector<FeatureInput> inputs = {
        DenseIds{.ids = no_ids, .shape = {int64_t{1} << 40, 0}}};
    EXPECT_EQ(error_of<InvalidArgument>([&] { layer.lookup(inputs, activations); }),
              "feature 'clicks': activation buffer holds " + std::to_string(size) +
                  " floats, expected [1099511627776, 4] = 4398046511104");
  }
}

}  // namespace
}  // namespace recemb

#include "train/run/held_out_evaluation.h"

#include <cmath>
#include <gtest/gtest.h>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/embedding.h"

#include "dlrm/criteo_profile.h"
#include "train/data/synthetic_criteo.h"
#include "train/report/metrics.h"

namespace recemb::train {
namespace {

constexpr int64_t kDim = 4;
constexpr uint64_t kSeed = 17;
constexpr int64_t kHeldOut = 1000;
// The predictions of a batch differ from those of the same examples in other batches by float
// rounding at most (the dense layers' products over batches of other sizes).
constexpr double kTolerance = 1e-6;

std::vector<int64_t> table_sizes() {
  std::mt19937_64 random(kSeed);
  std::vector<int64_t> sizes;
  for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
    sizes.push_back(1 + static_cast<int64_t>(random() % 60));
  }
  return sizes;
}

// 26 tables of random sizes and random rows, on one rank or split row-wise over the group of
// `group`.
Embedding make_embedding(const RankGroup& group) {
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  const std::vector<int64_t> sizes = table_sizes();
  for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
    const std::string name = dlrm::categorical_feature_name(f);
    tables.push_back({.name = name,
                      .vocabulary_size = sizes[static_cast<size_t>(f)],
                      .dim = kDim,
                      .initializer = TruncatedNormal{.stddev = 0.5f}});
    features.push_back({.name = name, .table = name});
  }
  EmbeddingOptions options{
      .num_threads = 1, .seed = kSeed, .communicator = group.embedding_communicator()};
  if (group.size() > 1) {
    options.placement =
        PlacementOptions{.num_shards = group.size(), .strategy = ShardingStrategy::kRowWise};
  }
  return Embedding(tables, features, options);
}

dlrm::DlrmDenseModel make_model() {
  return dlrm::DlrmDenseModel(
      {.embedding_dim = kDim, .bottom_mlp = {8, kDim}, .top_mlp = {16, 8}, .seed = kSeed});
}

dlrm::ExampleBatch held_out_set() {
  SyntheticCriteo source(
      {.seed = kSeed, .vocabulary_sizes = table_sizes(), .split = SyntheticSplit::kEval});
  dlrm::ExampleBatch batch;
  source.next(batch, kHeldOut);
  return batch;
}

// The reference: the whole set looked up and predicted in one batch, on one rank.
EvalRecord one_batch_record(const dlrm::ExampleBatch& set) {
  RankGroup group(nullptr);
  Embedding embedding = make_embedding(group);
  dlrm::DlrmDenseModel model = make_model();
  dlrm::BatchBuffers buffers(kDim);
  buffers.bind(set, 0, set.size);
  embedding.lookup(buffers.inputs(), buffers.activations());
  std::vector<float> probabilities(static_cast<size_t>(set.size));
  model.predict(set.dense, buffers.activation_views(), probabilities);
  return {.auc = roc_auc(probabilities, set.labels),
          .log_loss = log_loss(probabilities, set.labels)};
}

void expect_near(const EvalRecord& got, const EvalRecord& want) {
  EXPECT_EQ(got.step, 0);
  EXPECT_NEAR(got.auc, want.auc, kTolerance);
  EXPECT_NEAR(got.log_loss, want.log_loss, kTolerance * want.log_loss);
}

// Batches of 300: three whole ones and a short one.
TEST(HeldOutEvaluation, OneRankPredictsTheSetInBatches) {
  const dlrm::ExampleBatch set = held_out_set();
  ASSERT_EQ(set.size, kHeldOut);
  const EvalRecord want = one_batch_record(set);
  // Random rows and layers: predictions that differ from example to example, in an order that
  // the batching must keep.
  ASSERT_GT(std::abs(want.auc - 0.5), 0.02);
  RankGroup group(nullptr);
  RankErrors errors(group);
  Embedding embedding = make_embedding(group);
  dlrm::DlrmDenseModel model = make_model();
  HeldOutEvaluator evaluator(embedding, model, group, errors, 300);
  dlrm::BatchBuffers buffers(kDim);
  const EvalRecord got = evaluator.evaluate(set, buffers);
  expect_near(got, want);
  const EvalRecord again = evaluator.evaluate(set, buffers);  // nothing left of the first
  EXPECT_EQ(again.auc, got.auc);
  EXPECT_EQ(again.log_loss, got.log_loss);
}

// Three ranks, slices of 333, 333 and 334 in batches of 111: the shorter slices look up an empty
// fourth batch. Every rank gets the metrics of the whole set.
TEST(HeldOutEvaluation, RanksPredictTheirSlicesAndAgreeOnTheWholeSet) {
  constexpr int kRanks = 3;
  const dlrm::ExampleBatch set = held_out_set();
  const EvalRecord want = one_batch_record(set);
  const std::vector<std::shared_ptr<Communicator>> communicators = in_process_communicators(kRanks);
  std::vector<EvalRecord> records(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      RankGroup group(communicators[static_cast<size_t>(r)]);
      RankErrors errors(group);
      Embedding embedding = make_embedding(group);
      dlrm::DlrmDenseModel model = make_model();
      HeldOutEvaluator evaluator(embedding, model, group, errors, 111);
      dlrm::BatchBuffers buffers(kDim);
      records[static_cast<size_t>(r)] = evaluator.evaluate(set, buffers);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_near(records[static_cast<size_t>(r)], want);
    EXPECT_EQ(records[static_cast<size_t>(r)].auc, records[0].auc);  // bitwise: the same set
    EXPECT_EQ(records[static_cast<size_t>(r)].log_loss, records[0].log_loss);
  }
}

}  // namespace
}  // namespace recemb::train

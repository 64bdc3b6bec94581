#include "dlrm/predictor.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"

#include "dlrm/batch_buffers.h"
#include "dlrm/criteo_profile.h"
#include "dlrm/criteo_reader.h"
#include "dlrm/dlrm_dense_model.h"
#include "dlrm/model_file.h"
#include "testing/criteo_lines.h"
#include "testing/temporary_directory.h"

namespace recemb::dlrm {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kDim = 4;
constexpr float kPredictionTolerance = 5e-6f;

// The trainer's model: 26 tables C1..C26 (random sizes, random values; or dynamic tables, empty
// until hold_keys) and a dense model of random parameters, and the model directory exported from
// them.
struct Model {
  Embedding embedding;
  DlrmDenseModel dense;
};

Model make_model(uint64_t seed, CategoricalIds ids = CategoricalIds::kHashedRows) {
  std::mt19937_64 random(seed);
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    const std::string name = categorical_feature_name(f);
    tables.push_back({.name = name, .dim = kDim, .initializer = TruncatedNormal{.stddev = 0.5f}});
    if (ids == CategoricalIds::kRawKeys) {
      tables.back().dynamic_vocabulary = DynamicVocabulary{.capacity = 1000};
    } else {
      tables.back().vocabulary_size = 1 + static_cast<int64_t>(random() % 60);
    }
    features.push_back({.name = name, .table = name});
  }
  return Model{
      .embedding = Embedding(tables, features, {.num_threads = 1, .seed = seed}),
      .dense = DlrmDenseModel(
          {.embedding_dim = kDim, .bottom_mlp = {8, kDim}, .top_mlp = {16, 8}, .seed = seed})};
}

void export_model(const Model& model, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const std::span<const float> parameters = model.dense.parameters();
  write_model_file(model.embedding,
                   DenseModelPart{.config = model.dense.config(),
                                  .parameters = {parameters.begin(), parameters.end()}},
                   dir / kModelFileName, ServingDtype::kFloat32);
}

// Dynamic tables: every other distinct key of each column of `lines` (labelled) held, with random
// rows; the others read zero rows.
void hold_keys(Model& model, const std::vector<std::string>& lines, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<float> value(0.0f, 0.5f);
  std::vector<std::set<int64_t>> keys(kNumCategoricalFeatures);
  for (const std::string& line : lines) {
    float label = 0.0f;
    std::vector<float> dense(kNumDenseFeatures);
    std::vector<int64_t> ids(kNumCategoricalFeatures);
    if (parse_criteo_line(line, CriteoLabel::kPresent, CategoricalIds::kRawKeys, {}, label, dense,
                          ids.data(), 1)) {
      continue;  // malformed
    }
    for (int f = 0; f < kNumCategoricalFeatures; ++f) keys[static_cast<size_t>(f)].insert(ids[f]);
  }
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    DynamicTableContents contents;
    bool hold = true;
    for (const int64_t key : keys[static_cast<size_t>(f)]) {
      if (hold) contents.keys.push_back(key);
      hold = !hold;
    }
    for (size_t i = 0; i < contents.keys.size() * kDim; ++i) {
      contents.parameters.push_back(value(random));
    }
    model.embedding.write_dynamic_table(categorical_feature_name(f), contents);
  }
}

// The trainer's evaluation of the file `path` in one batch: CriteoReader, Embedding::lookup,
// DlrmDenseModel::predict.
std::vector<float> trainer_probabilities(Model& model, const std::filesystem::path& path) {
  ReaderOptions options{.ids = CategoricalIds::kRawKeys};
  if (!model.embedding.tables()[0].dynamic_vocabulary) {
    options = {};
    for (const TableConfig& table : model.embedding.tables()) {
      options.vocabulary_sizes.push_back(table.vocabulary_size);
    }
  }
  CriteoReader reader({path.string()}, options);
  ExampleBatch batch;
  reader.next(batch, 100000);
  BatchBuffers buffers(kDim);
  buffers.bind(batch, 0, batch.size);
  model.embedding.lookup(buffers.inputs(), buffers.activations());
  std::vector<float> probabilities(static_cast<size_t>(batch.size));
  model.dense.predict(batch.dense, buffers.activation_views(), probabilities);
  return probabilities;
}

std::vector<Prediction> predict(Predictor& predictor, const std::vector<std::string>& lines,
                                CriteoLabel labels = CriteoLabel::kFromFieldCount) {
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  std::vector<Prediction> results(lines.size());
  predictor.predict(views, results, labels);
  return results;
}

// Good and malformed lines predicted together, with their labels and without: each valid line's
// probability equals bitwise the trainer's for the same batch of valid lines, each malformed one
// gets the reader's message, and the labels do not matter. Lines without their label are read
// with CriteoLabel::kAbsent; by their field count (39), they are refused as ambiguous. The model's
// tables: static (`ids` kHashedRows) or dynamic (kRawKeys), holding half of the lines' keys.
void expect_the_trainers_evaluation(CategoricalIds ids) {
  const test::TemporaryDirectory dir;
  Model model = make_model(5, ids);
  std::mt19937_64 random(17);
  std::vector<std::string> lines, unlabelled;
  std::vector<bool> malformed;
  std::string file;
  for (int i = 0; i < 300; ++i) {
    const bool bad = i % 37 == 5;
    std::string line = test::random_criteo_line(random, true);
    if (bad) line += "\tzz";  // one field too many
    file += line + "\n";
    lines.push_back(line);
    unlabelled.push_back(line.substr(line.find('\t') + 1));
    malformed.push_back(bad);
  }
  lines.back() += "\r";  // a CRLF line
  unlabelled.back() += "\r";
  std::ofstream(dir / "lines.tsv") << file;
  if (ids == CategoricalIds::kRawKeys) hold_keys(model, lines, 9);
  export_model(model, dir / "model");
  const std::vector<float> expected = trainer_probabilities(model, dir / "lines.tsv");

  Predictor predictor = Predictor::open(dir / "model");
  for (const CriteoLabel labels : {CriteoLabel::kFromFieldCount, CriteoLabel::kPresent}) {
    SCOPED_TRACE(labels == CriteoLabel::kPresent ? "labelled, --labels yes" : "labelled");
    const std::vector<Prediction> results = predict(predictor, lines, labels);
    size_t valid = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      SCOPED_TRACE("line " + std::to_string(i));
      if (malformed[i]) {
        EXPECT_THAT(results[i].error, HasSubstr("expected 40 tab-separated fields, found 41"));
        continue;
      }
      ASSERT_EQ(results[i].error, "");
      ASSERT_LT(valid, expected.size());
      EXPECT_EQ(results[i].probability, expected[valid++]);
    }
    EXPECT_EQ(valid, expected.size());
  }
  const std::vector<Prediction> without = predict(predictor, unlabelled, CriteoLabel::kAbsent);
  const std::vector<Prediction> ambiguous = predict(predictor, unlabelled);
  size_t valid = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE("unlabelled line " + std::to_string(i));
    if (malformed[i]) {
      EXPECT_THAT(without[i].error, HasSubstr("expected 39 tab-separated fields, found 40"));
      EXPECT_NE(ambiguous[i].error, "");  // read as labelled: its first field is no label
      continue;
    }
    ASSERT_EQ(without[i].error, "");
    EXPECT_EQ(without[i].probability, expected[valid++]);
    EXPECT_THAT(ambiguous[i].error, HasSubstr("39 tab-separated fields: a line without its label"));
  }
  // Not a constant model: the probabilities differ between lines.
  EXPECT_GT(*std::max_element(expected.begin(), expected.end()) -
                *std::min_element(expected.begin(), expected.end()),
            0.05f);
}

TEST(PredictorTest, EqualsTheTrainersEvaluationLineForLine) {
  expect_the_trainers_evaluation(CategoricalIds::kHashedRows);
}

TEST(PredictorTest, EqualsTheTrainersEvaluationOfDynamicTablesLineForLine) {
  expect_the_trainers_evaluation(CategoricalIds::kRawKeys);
}

// A random model (make_model(seed)) exported as `model_dir`, opened as a Predictor.
Predictor exported_predictor(uint64_t seed, const std::filesystem::path& model_dir) {
  Model model = make_model(seed);
  export_model(model, model_dir);
  return Predictor::open(model_dir);
}

// A labelled line whose empty last field lost its tab (39 fields) is refused as ambiguous rather
// than read as one without its label (every field shifted); --labels yes reads it as the trainer
// does (the missing field empty), and an empty line says so.
TEST(PredictorTest, ALineOf39FieldsIsAmbiguousUnlessTheLabelsAreSaid) {
  const test::TemporaryDirectory dir;
  Predictor predictor = exported_predictor(29, dir / "model");
  std::mt19937_64 random(23);
  std::string full = test::random_criteo_line(random, true);
  full = full.substr(0, full.rfind('\t'));   // C26 dropped
  const std::string trimmed = full;          // 39 fields, the label first
  const std::string complete = full + "\t";  // 40 fields, C26 empty
  const std::vector<Prediction> by_count = predict(predictor, {trimmed, complete, ""});
  EXPECT_THAT(by_count[0].error, HasSubstr("39 tab-separated fields"));
  EXPECT_EQ(by_count[1].error, "");
  EXPECT_EQ(by_count[2].error, "empty line");
  const std::vector<Prediction> labelled =
      predict(predictor, {trimmed, complete}, CriteoLabel::kPresent);
  ASSERT_EQ(labelled[0].error, "");
  EXPECT_NEAR(labelled[0].probability, labelled[1].probability, 1e-6);
  EXPECT_EQ(predict(predictor, {""}, CriteoLabel::kAbsent)[0].error, "empty line");
}

// `n` random Criteo lines (with their labels), from `seed`.
std::vector<std::string> random_lines(uint64_t seed, int n) {
  std::mt19937_64 random(seed);
  std::vector<std::string> lines;
  for (int i = 0; i < n; ++i) lines.push_back(test::random_criteo_line(random));
  return lines;
}

// One line at a time, the dense layers round differently than in a batch of 300: Eigen's
// products take other kernels (another summation order) for one row. Each of the layers' dot
// products (up to 367 terms, the interaction's width) then differs by a few float32 roundings of
// its larger terms, about 1e-7 relative in a logit of magnitude ~1..10, and the sigmoid's slope is
// at most 1/4: the probabilities agree within kPredictionTolerance (observed: up to 6e-7).
TEST(PredictorTest, LineByLineAgreesWithBatchesToFloatRounding) {
  const test::TemporaryDirectory dir;
  Predictor predictor = exported_predictor(8, dir / "model");
  const std::vector<std::string> lines = random_lines(3, 300);
  const std::vector<Prediction> batched = predict(predictor, lines);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<Prediction> alone = predict(predictor, {lines[i]});
    EXPECT_NEAR(alone[0].probability, batched[i].probability, kPredictionTolerance) << "line " << i;
  }
}

// Copies share the tables and predict on their own threads at once, as the original does alone.
TEST(PredictorTest, CopiesPredictConcurrentlyAsTheOriginal) {
  const test::TemporaryDirectory dir;
  Predictor original = exported_predictor(6, dir / "model");
  const std::vector<std::string> lines = random_lines(4, 200);
  const std::vector<Prediction> expected = predict(original, lines);
  // A predictor over a model already open predicts as the one that opened it.
  Predictor over_open = Predictor::of(ServingModel::open(dir / "model" / "model.recemb"));
  const std::vector<Prediction> over_open_results = predict(over_open, lines);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(over_open_results[i].probability, expected[i].probability) << "line " << i;
  }
  std::vector<Predictor> copies(3, original);
  std::vector<std::vector<Prediction>> results(copies.size());
  std::vector<std::thread> threads;
  for (size_t c = 0; c < copies.size(); ++c) {
    threads.emplace_back([&, c] {
      for (int round = 0; round < 3; ++round) results[c] = predict(copies[c], lines);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::vector<Prediction>& result : results) {
    ASSERT_EQ(result.size(), expected.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(result[i].error, expected[i].error);
      EXPECT_EQ(result[i].probability, expected[i].probability) << "line " << i;
    }
  }
}

TEST(PredictorTest, MalformedLinesGetTheReadersMessages) {
  const test::TemporaryDirectory dir;
  export_model(make_model(2), dir / "model");
  Predictor predictor = Predictor::open(dir / "model");
  std::mt19937_64 random(1);
  std::string bad_label = test::random_criteo_line(random);
  bad_label[0] = '7';
  std::string bad_hex = test::random_criteo_line(random, false);
  bad_hex += "xyz";  // C26 is no longer hexadecimal
  const std::vector<Prediction> results =
      predict(predictor, {bad_label, "1\t" + bad_hex, "", std::string(5000, '1')});
  EXPECT_THAT(results[0].error, HasSubstr("label '7' is not 0 or 1"));
  EXPECT_THAT(results[1].error, HasSubstr("C26 '"));
  EXPECT_THAT(results[1].error, HasSubstr("is not 1 to 16 hexadecimal digits"));
  EXPECT_EQ(results[2].error, "empty line");
  EXPECT_THAT(results[3].error, HasSubstr("line longer than 4096 bytes"));
  std::vector<Prediction> two(2);
  const std::vector<std::string_view> one = {bad_label};
  EXPECT_THROW(predictor.predict(one, two), InvalidArgument);
}

// A model without a dense part (exported from a checkpoint of another program) serves lookups
// only; a directory without a model file is ENOENT naming the file.
TEST(PredictorTest, RefusesModelsWithoutADensePart) {
  const test::TemporaryDirectory dir;
  const Model model = make_model(2);
  write_model_file(model.embedding, std::nullopt, dir / kModelFileName, ServingDtype::kFloat32);
  EXPECT_THROW(
      {
        try {
          Predictor::open(dir.path());
        } catch (const InvalidArgument& error) {
          EXPECT_THAT(error.what(), HasSubstr("has no dense model"));
          throw;
        }
      },
      InvalidArgument);
  std::filesystem::create_directories(dir / "empty");
  try {
    Predictor::open(dir / "empty");
    ADD_FAILURE() << "opened";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code(), std::errc::no_such_file_or_directory);
    EXPECT_THAT(error.what(), HasSubstr((dir / "empty" / "model.recemb").string()));
  }
}

}  // namespace
}  // namespace recemb::dlrm

// publish (recemb/publish.h) and ServingModel::apply_delta / clone (docs/serving.md, "Publishing
// deltas"): a base plus its deltas, applied in order, equals a fresh export of the same step byte
// for byte in every table's rows and keys and bitwise in lookups, for every dtype, with static
// tables (lazy and dense updates) and a dynamic table whose keys come and go (admission, eviction,
// TTL); and every refusal (damaged, truncated, wrong base, out of order, shared model) leaves the
// model as it was.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/publish.h"
#include "recemb/serving.h"

#include "serving/model_access.h"
#include "serving/serving_scenario.h"
#include "testing/embedding_calls.h"
#include "testing/error_of.h"
#include "testing/fault_file_system.h"
#include "testing/files.h"
#include "testing/random_batches.h"
#include "testing/temporary_directory.h"

namespace recemb {
namespace {

using internal::ServingModelAccess;
using test::error_of;
using test::kDtypes;
using test::OwnedInput;
using test::TemporaryDirectory;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kBatch = 8;
constexpr int64_t kItems = 300;
constexpr int64_t kDense = 40;
constexpr int64_t kUserKeys = 150;  // the keys drawn; the table holds at most 48

// `items_dtype`: the items table's (a 16-bit one publishes its rows decoded exactly).
std::vector<TableConfig> tables(DType items_dtype) {
  return {
      {.name = "items",
       .vocabulary_size = kItems,
       .dim = 5,
       .optimizer = Adagrad{.learning_rate = 0.3f},
       .dtype = items_dtype},
      {.name = "dense",
       .vocabulary_size = kDense,
       .dim = 3,
       .optimizer = Adam{.learning_rate = 0.01f, .lazy_adam = false}},
      {.name = "user",
       .dim = 6,
       .optimizer = Adagrad{.learning_rate = 0.5f},
       .dynamic_vocabulary = DynamicVocabulary{.capacity = 48, .min_count = 2, .ttl_steps = 4}}};
}

std::vector<FeatureConfig> features() {
  return {{.name = "item_bags", .table = "items"},
          {.name = "dense_ids", .table = "dense"},
          {.name = "user_bags", .table = "user"}};
}

Embedding make_layer(uint64_t seed, DType items_dtype = DType::kFloat32) {
  return Embedding(
      tables(items_dtype), features(),
      EmbeddingOptions{.optimizer = Sgd{.learning_rate = 0.1f}, .num_threads = 2, .seed = seed});
}

std::vector<OwnedInput> random_inputs(std::mt19937_64& rng, int64_t items_used) {
  std::vector<test::Bag> users =
      test::random_bags(rng, kBatch, {.vocabulary_size = kUserKeys, .max_length = 5});
  for (test::Bag& bag : users) {
    for (int64_t& id : bag.ids) id = id * 7919 - 500;  // keys of both signs
  }
  return {OwnedInput::ragged(
              test::random_bags(rng, kBatch, {.vocabulary_size = items_used, .max_length = 4}),
              test::random_bool(rng)),
          test::random_one_dim_input(rng, kBatch, kDense),
          OwnedInput::ragged(std::move(users), test::random_bool(rng))};
}

// `steps` training steps; the items drawn from the first items_used rows (few rows change).
void train(Embedding& layer, std::mt19937_64& rng, int steps, int64_t items_used) {
  LookupBatch batch;
  for (int step = 0; step < steps; ++step) {
    const std::vector<std::vector<float>> activations =
        test::look_up(layer, random_inputs(rng, items_used), batch);
    std::vector<std::vector<float>> gradients;
    for (const std::vector<float>& activation : activations) {
      gradients.push_back(test::random_gradient(rng, activation.size()));
    }
    test::train(layer, batch, gradients);
  }
}

std::vector<std::byte> bytes_of(std::span<const std::byte> bytes) {
  return {bytes.begin(), bytes.end()};
}

// Expects `model` to equal `expected` (a fresh export): every table's rows and keys byte for
// byte, the extra arrays and metadata, and lookups bitwise on random inputs.
void expect_same_model(const ServingModel& model, const ServingModel& expected,
                       std::mt19937_64& rng, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(model.tables().size(), expected.tables().size());
  for (size_t t = 0; t < model.tables().size(); ++t) {
    SCOPED_TRACE(model.tables()[t].name);
    const std::span<const int64_t> keys = ServingModelAccess::table_keys(model, t);
    const std::span<const int64_t> expected_keys = ServingModelAccess::table_keys(expected, t);
    EXPECT_EQ(std::vector<int64_t>(keys.begin(), keys.end()),
              std::vector<int64_t>(expected_keys.begin(), expected_keys.end()));
    EXPECT_TRUE(bytes_of(ServingModelAccess::table_rows(model, t)) ==
                bytes_of(ServingModelAccess::table_rows(expected, t)));
  }
  EXPECT_EQ(model.metadata(), expected.metadata());
  ASSERT_EQ(model.extra_arrays().size(), expected.extra_arrays().size());
  for (size_t a = 0; a < model.extra_arrays().size(); ++a) {
    const std::span<const float> values = model.extra_arrays()[a].values;
    const std::span<const float> expected_values = expected.extra_arrays()[a].values;
    EXPECT_TRUE(test::bitwise_equal({values.begin(), values.end()},
                                    {expected_values.begin(), expected_values.end()}));
  }
  for (int round = 0; round < 3; ++round) {
    const std::vector<OwnedInput> inputs = random_inputs(rng, kItems);
    const std::vector<FeatureInput> views = test::views_of(inputs);
    const std::vector<std::vector<float>> got = test::lookup_activations(model, views);
    const std::vector<std::vector<float>> want = test::lookup_activations(expected, views);
    for (size_t f = 0; f < got.size(); ++f) EXPECT_TRUE(test::bitwise_equal(got[f], want[f]));
  }
}

// The options of publish k: an extra array and metadata that change with it.
struct Extras {
  std::vector<float> weights;
  PublishOptions options;
};

Extras extras_for(ServingDtype dtype, int k) {
  Extras extras{.weights = {0.5f * static_cast<float>(k), -1.0f, 2.0f + static_cast<float>(k)}};
  extras.options = {.dtype = dtype,
                    .extra_arrays = {{.name = "top/w", .shape = {3}, .values = extras.weights}},
                    .metadata = {{"publish", std::to_string(k)}}};
  return extras;
}

TEST(PublishTest, ModelDirectoryNames) {
  EXPECT_EQ(model_version_of("1"), 1);
  EXPECT_EQ(model_version_of("9223372036854775807"), INT64_MAX);
  for (const char* name : {"", "0", "01", "-1", "+1", "1a", "9223372036854775808", " 1"}) {
    EXPECT_EQ(model_version_of(name), std::nullopt) << name;
  }
  EXPECT_EQ(delta_file_name(1), "delta-00000001.recemb");
  EXPECT_EQ(delta_file_name(123456789), "delta-123456789.recemb");
  EXPECT_STREQ(kModelFileName, "model.recemb");
}

TEST(PublishTest, BasePlusDeltasEqualsAFreshExportOfEveryStep) {
  for (const auto& [dtype, items_dtype] : {std::pair{ServingDtype::kFloat32, DType::kFloat32},
                                           std::pair{ServingDtype::kFloat16, DType::kFloat32},
                                           std::pair{ServingDtype::kInt8, DType::kFloat32},
                                           std::pair{ServingDtype::kFloat32, DType::kBFloat16},
                                           std::pair{ServingDtype::kInt8, DType::kFloat16}}) {
    SCOPED_TRACE(std::string(serving_dtype_name(dtype)) + ", items " +
                 std::string(dtype_name(items_dtype)));
    TemporaryDirectory directory;
    const std::filesystem::path dir = directory / "model";
    std::mt19937_64 rng(17);
    Embedding layer = make_layer(5, items_dtype);
    train(layer, rng, 2, 30);
    Extras extras = extras_for(dtype, 0);
    const PublishResult base = publish(layer, dir, extras.options);
    EXPECT_EQ(base.file, dir / "1" / "model.recemb");
    EXPECT_EQ(base.version, 1);
    EXPECT_EQ(base.sequence, 0);
    // A base is export_serving_model's bytes.
    const std::filesystem::path fresh_base = directory / "fresh-0.recemb";
    export_serving_model(layer, fresh_base,
                         {.dtype = dtype,
                          .extra_arrays = extras.options.extra_arrays,
                          .metadata = extras.options.metadata});
    EXPECT_TRUE(test::read_bytes(base.file) == test::read_bytes(fresh_base));

    std::vector<std::filesystem::path> deltas;
    std::vector<std::filesystem::path> fresh;
    for (int k = 1; k <= 6; ++k) {
      // Publish 3 follows no training: an empty delta (but the dense Adam table's rows).
      if (k != 3) train(layer, rng, k == 5 ? 6 : 2, 30);
      if (k == 4) {
        // A training lookup not applied: the keys it admitted are in the export, with their
        // initial rows, and so in the delta.
        LookupBatch pending;
        test::look_up(layer, random_inputs(rng, 30), pending);
      }
      extras = extras_for(dtype, k);
      const PublishResult delta = publish(layer, dir, extras.options);
      EXPECT_EQ(delta.version, 1);
      EXPECT_EQ(delta.sequence, k);
      char name[32];
      std::snprintf(name, sizeof name, "delta-%08d.recemb", k);
      EXPECT_EQ(delta.file, dir / "1" / name);
      if (k == 3) {
        EXPECT_EQ(delta.rows, 0);
      } else {
        EXPECT_GT(delta.rows, 0);
        EXPECT_LT(delta.rows, kItems);  // only the changed rows
      }
      deltas.push_back(delta.file);
      fresh.push_back(directory / ("fresh-" + std::to_string(k) + ".recemb"));
      export_serving_model(layer, fresh.back(),
                           {.dtype = dtype,
                            .extra_arrays = extras.options.extra_arrays,
                            .metadata = extras.options.metadata});
    }
    ServingModel model = ServingModel::open(base.file);
    EXPECT_EQ(model.delta_sequence(), 0);
    expect_same_model(model, ServingModel::open(fresh_base), rng, "base");
    for (size_t k = 0; k < deltas.size(); ++k) {
      model.apply_delta(deltas[k]);
      EXPECT_EQ(model.delta_sequence(), static_cast<int64_t>(k) + 1);
      expect_same_model(model, ServingModel::open(fresh[k]), rng,
                        "after delta " + std::to_string(k + 1));
      // A clone is the same model, in memory of its own.
      if (k == 3) {
        const ServingModel copy = model.clone();
        EXPECT_EQ(copy.delta_sequence(), model.delta_sequence());
        expect_same_model(copy, ServingModel::open(fresh[k]), rng, "clone");
      }
    }
  }
}

// A base and three deltas of a trained layer, for the refusal tests.
struct Published {
  TemporaryDirectory directory;
  std::filesystem::path base;
  std::vector<std::filesystem::path> deltas;
};

void publish_some(Published& published, uint64_t seed, const std::string& name) {
  std::mt19937_64 rng(seed);
  Embedding layer = make_layer(seed);
  train(layer, rng, 2, kItems);
  published.base = publish(layer, published.directory / name).file;
  for (int k = 0; k < 3; ++k) {
    train(layer, rng, 2, kItems);
    published.deltas.push_back(publish(layer, published.directory / name).file);
  }
}

void expect_unchanged(const ServingModel& model, const std::filesystem::path& base) {
  std::mt19937_64 rng(3);
  EXPECT_EQ(model.delta_sequence(), 0);
  expect_same_model(model, ServingModel::open(base), rng, "unchanged");
}

TEST(ApplyDeltaTest, DamagedOrTruncatedDeltasAreRefusedAndChangeNothing) {
  Published published;
  publish_some(published, 9, "m");
  const std::vector<std::byte> good = test::read_bytes(published.deltas[0]);
  std::mt19937_64 rng(21);
  const std::filesystem::path damaged = published.directory / "damaged.recemb";
  ServingModel model = ServingModel::open(published.base);
  // Every region: the header, the manifest, the blobs.
  std::vector<size_t> positions = {0, 9, 20, 30, 60, 70, 100, good.size() - 1};
  for (int i = 0; i < 30; ++i) positions.push_back(rng() % good.size());
  for (const size_t position : positions) {
    std::vector<std::byte> bytes = good;
    bytes[position] ^= std::byte{0x10};
    test::write_bytes(damaged, bytes);
    EXPECT_THROW(model.apply_delta(damaged), DataLoss) << "byte " << position;
  }
  test::write_bytes(damaged, std::span(good).first(good.size() - 64));
  EXPECT_THAT(error_of<DataLoss>([&] { model.apply_delta(damaged); }), HasSubstr("truncated"));
  // A model is not a delta, and a delta is not a model.
  EXPECT_THAT(error_of<DataLoss>([&] { model.apply_delta(published.base); }),
              HasSubstr("RECEMBDL"));
  EXPECT_THAT(error_of<DataLoss>([&] { ServingModel::open(published.deltas[0]); }),
              HasSubstr("RECEMBSV"));
  expect_unchanged(model, published.base);
  model.apply_delta(published.deltas[0]);  // the intact one still applies
  EXPECT_EQ(model.delta_sequence(), 1);
}

TEST(ApplyDeltaTest, WrongBaseOutOfOrderAndSharedModelsAreRefused) {
  Published published;
  publish_some(published, 9, "m");
  Published other;
  publish_some(other, 10, "m");
  ServingModel model = ServingModel::open(published.base);
  EXPECT_THAT(error_of<FailedPrecondition>([&] { model.apply_delta(other.deltas[0]); }),
              AllOf(HasSubstr("base"), HasSubstr(other.deltas[0].string())));
  EXPECT_THAT(error_of<FailedPrecondition>([&] { model.apply_delta(published.deltas[1]); }),
              AllOf(HasSubstr("sequence 2"), HasSubstr("takes sequence 1")));
  {
    const ServingModel copy = model;  // a lookup could hold it
    EXPECT_THAT(error_of<FailedPrecondition>([&] { model.apply_delta(published.deltas[0]); }),
                HasSubstr("clone()"));
  }
  expect_unchanged(model, published.base);
  // A clone no one else holds takes the deltas; the model it was cloned from does not change.
  ServingModel replica = model.clone();
  for (const std::filesystem::path& delta : published.deltas) replica.apply_delta(delta);
  EXPECT_EQ(replica.delta_sequence(), 3);
  EXPECT_THAT(error_of<FailedPrecondition>([&] { replica.apply_delta(published.deltas[2]); }),
              AllOf(HasSubstr("sequence 3"), HasSubstr("takes sequence 4")));
  expect_unchanged(model, published.base);
}

TEST(PublishTest, UntrackedWritesAndNewDtypesWriteANewBase) {
  TemporaryDirectory directory;
  const std::filesystem::path dir = directory / "m";
  std::mt19937_64 rng(4);
  Embedding layer = make_layer(4);
  EXPECT_EQ(publish(layer, dir).sequence, 0);
  train(layer, rng, 1, kItems);
  EXPECT_EQ(publish(layer, dir).sequence, 1);
  // Saving a checkpoint writes no row: deltas go on. Restoring one is not tracked: a base.
  const std::filesystem::path checkpoint = save_checkpoint(layer, directory / "ckpt");
  train(layer, rng, 1, kItems);
  EXPECT_EQ(publish(layer, dir).sequence, 2);
  restore_checkpoint(layer, checkpoint);
  EXPECT_EQ(publish(layer, dir).sequence, 0);
  EXPECT_EQ(publish(layer, dir).sequence, 1);
  // write_variable is not tracked row by row: a base, in the next version.
  std::vector<float> rows = test::read(layer, "items", "parameters");
  rows[7] += 1.0f;
  layer.write_variable("items", "parameters", rows);
  PublishResult result = publish(layer, dir);
  EXPECT_EQ(result.sequence, 0);
  EXPECT_EQ(result.version, 3);
  EXPECT_EQ(publish(layer, dir).sequence, 1);
  // Another dtype: a base.
  result = publish(layer, dir, {.dtype = ServingDtype::kInt8});
  EXPECT_EQ(result.sequence, 0);
  EXPECT_EQ(result.version, 4);
  // Another directory: a base there.
  result = publish(layer, directory / "other", {.dtype = ServingDtype::kInt8});
  EXPECT_EQ(result.sequence, 0);
  EXPECT_EQ(result.version, 1);
  // Bad options throw before anything is written.
  const std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN()};
  EXPECT_THROW(publish(layer, directory / "other",
                       {.extra_arrays = {{.name = "x", .shape = {1}, .values = nan}}}),
               InvalidArgument);
  EXPECT_EQ(publish(layer, directory / "other", {.dtype = ServingDtype::kInt8}).sequence, 1);
}

// Every way to write rows besides a training step goes through the parts' untracked door
// (embedding/table_state.h): each makes the next publish a base naming why, and training alone
// (even one that admits and evicts keys) leaves deltas going.
TEST(PublishTest, EveryWriterButTrainingMakesTheNextPublishABase) {
  TemporaryDirectory directory;
  const std::filesystem::path dir = directory / "m";
  std::mt19937_64 rng(6);
  Embedding layer = make_layer(6);
  const std::vector<std::pair<std::string, std::function<void()>>> writers = {
      {"variable_data", [&] { layer.variable_data("items", "parameters")[3] += 1.0f; }},
      {"write_variable",
       [&] {
         layer.write_variable("dense", "parameters", test::read(layer, "dense", "parameters"));
       }},
      {"write_dynamic_table",
       [&] { layer.write_dynamic_table("user", layer.read_dynamic_table("user")); }},
      {"restore_checkpoint",
       [&] { restore_checkpoint(layer, save_checkpoint(layer, directory / "ckpt")); }}};
  publish(layer, dir);
  for (const auto& [name, write] : writers) {
    SCOPED_TRACE(name);
    train(layer, rng, 3, kItems);
    ASSERT_GT(publish(layer, dir).sequence, 0);
    write();
    const PublishResult base = publish(layer, dir);
    EXPECT_EQ(base.sequence, 0);
    EXPECT_THAT(base.base_reason, HasSubstr("rows written since by other than training steps"));
    train(layer, rng, 2, kItems);
    EXPECT_EQ(publish(layer, dir).sequence, 1);
  }
}

// begin_publish: the delta written on another thread while the layer trains on holds the rows
// of the step it began at.
TEST(PublishTest, ADeltaWrittenWhileTrainingHoldsTheRowsOfItsStep) {
  for (const ServingDtype dtype : kDtypes) {
    SCOPED_TRACE(serving_dtype_name(dtype));
    TemporaryDirectory directory;
    const std::filesystem::path dir = directory / "m";
    std::mt19937_64 rng(12);
    Embedding layer = make_layer(12);
    Extras extras = extras_for(dtype, 0);
    const PublishResult base = publish(layer, dir, extras.options);
    train(layer, rng, 3, kItems);
    extras = extras_for(dtype, 1);
    export_serving_model(layer, directory / "fresh.recemb",
                         {.dtype = dtype,
                          .extra_arrays = extras.options.extra_arrays,
                          .metadata = extras.options.metadata});
    std::function<PublishResult()> write = begin_publish(layer, dir, extras.options);
    extras.weights.assign(3, 7.0f);  // the arrays were copied
    PublishResult delta;
    std::thread writer([&] { delta = write(); });
    train(layer, rng, 3, kItems);
    writer.join();
    EXPECT_EQ(delta.sequence, 1);
    ServingModel model = ServingModel::open(base.file);
    model.apply_delta(delta.file);
    expect_same_model(model, ServingModel::open(directory / "fresh.recemb"), rng, "delta");
    // The next delta holds the rows trained since.
    EXPECT_EQ(publish(layer, dir, extras.options).sequence, 2);
  }
}

TEST(PublishTest, AFailedDeltaWriteLeavesNoFileAndMakesTheNextPublishABase) {
  TemporaryDirectory directory;
  const std::filesystem::path dir = directory / "m";
  std::mt19937_64 rng(8);
  Embedding layer = make_layer(8);
  publish(layer, dir);
  train(layer, rng, 2, kItems);
  {
    test::FaultFileSystem faults;
    faults.fail(test::FaultPoint::kSync, 1, ENOSPC);
    EXPECT_THROW(publish(layer, dir), std::system_error);
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "1" / "delta-00000001.recemb"));
  train(layer, rng, 1, kItems);
  // The rows the failed delta took are in no file: a base, equal to a fresh export.
  const PublishResult result = publish(layer, dir);
  EXPECT_EQ(result.sequence, 0);
  EXPECT_EQ(result.version, 2);
  export_serving_model(layer, directory / "fresh.recemb");
  EXPECT_TRUE(test::read_bytes(result.file) == test::read_bytes(directory / "fresh.recemb"));
  EXPECT_EQ(publish(layer, dir).sequence, 1);
}

// The files of the model directory `dir`, relative to it ("3/delta-00000002.recemb"), sorted.
std::vector<std::string> files_in(const std::filesystem::path& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) {
      files.push_back(std::filesystem::relative(entry.path(), dir).string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// What a server can see of `dir` at any moment: every version directory it lists holds its base,
// and its deltas are 1..n without a gap. Returns a description of the first violation ("" when
// none); a version removed while it is being read is not one.
std::string inconsistency_seen(const std::filesystem::path& dir) {
  std::error_code error;
  for (const auto& version : std::filesystem::directory_iterator(dir, error)) {
    if (!model_version_of(version.path().filename().string())) continue;
    std::vector<int64_t> deltas;
    bool base = false;
    std::error_code listing;
    for (const auto& file : std::filesystem::directory_iterator(version.path(), listing)) {
      const std::string name = file.path().filename().string();
      if (name == kModelFileName) base = true;
      for (int64_t sequence = 1; sequence <= 64; ++sequence) {
        if (name == delta_file_name(sequence)) deltas.push_back(sequence);
      }
    }
    std::sort(deltas.begin(), deltas.end());
    std::string violation = base ? "" : " has no base";
    for (size_t d = 0; d < deltas.size(); ++d) {
      if (deltas[d] != static_cast<int64_t>(d) + 1) violation = ": a gap in its deltas";
    }
    // Renamed away (then removed) while it was listed: gone whole, which a reader may see.
    if (listing || !std::filesystem::exists(version.path())) continue;
    if (!violation.empty()) return version.path().string() + violation;
  }
  return "";
}

// Retention: a new base every 3 deltas, the 2 newest versions kept. After each of 17 publishes
// the files on disk are the rule's prediction; a reader listing the directory meanwhile (another
// thread) never sees a version without its base or with a gap in its deltas; and the newest
// version, opened with its deltas applied, equals a fresh export of the step.
TEST(PublishTest, RetentionKeepsTheNewestVersionsWithABaseEveryFewDeltas) {
  TemporaryDirectory directory;
  const std::filesystem::path dir = directory / "m";
  std::mt19937_64 rng(21);
  Embedding layer = make_layer(21);
  constexpr int64_t kDeltas = 3;  // per base
  const PublishOptions options{.base_every_deltas = kDeltas, .keep_versions = 2};
  std::atomic<bool> done{false};
  std::string seen;
  std::thread reader([&] {
    while (!done.load() && seen.empty()) {
      if (std::filesystem::exists(dir)) seen = inconsistency_seen(dir);
    }
  });
  for (int k = 0; k < 17; ++k) {
    const PublishResult result = publish(layer, dir, options);
    const int64_t version = k / (kDeltas + 1) + 1, sequence = k % (kDeltas + 1);
    EXPECT_EQ(result.version, version) << k;
    EXPECT_EQ(result.sequence, sequence) << k;
    if (sequence == 0 && version > 1) {
      EXPECT_THAT(result.base_reason, HasSubstr("the base has 3 deltas (base_every_deltas 3)"));
    }
    if (sequence == 0 && version > 2) {
      EXPECT_EQ(result.removed_versions, std::vector<int64_t>{version - 2}) << k;
    } else {
      EXPECT_TRUE(result.removed_versions.empty()) << k;
    }
    EXPECT_EQ(result.bytes, static_cast<int64_t>(std::filesystem::file_size(result.file)));
    // The rule's prediction: the version before, whole, and this one up to this publish.
    std::vector<std::string> expected;
    for (int64_t v = std::max<int64_t>(1, version - 1); v <= version; ++v) {
      expected.push_back(std::to_string(v) + "/" + kModelFileName);
      for (int64_t d = 1; d <= (v == version ? sequence : kDeltas); ++d) {
        expected.push_back(std::to_string(v) + "/" + delta_file_name(d));
      }
    }
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(files_in(dir), expected) << k;
    // What a server restarting now serves: the newest base and its deltas.
    ServingModel served = ServingModel::open(dir / std::to_string(version) / kModelFileName);
    for (int64_t d = 1; d <= sequence; ++d) {
      served.apply_delta(dir / std::to_string(version) / delta_file_name(d));
    }
    export_serving_model(layer, directory / "fresh.recemb");
    expect_same_model(served, ServingModel::open(directory / "fresh.recemb"), rng,
                      "publish " + std::to_string(k));
    train(layer, rng, 1, kItems);
  }
  done.store(true);
  reader.join();
  EXPECT_EQ(seen, "");
}

// base_every_bytes: a new base once the deltas hold that many bytes; keep_versions 0 keeps all.
TEST(PublishTest, ANewBaseOnceTheDeltasHoldBaseEveryBytes) {
  TemporaryDirectory directory;
  const std::filesystem::path dir = directory / "m";
  std::mt19937_64 rng(22);
  Embedding layer = make_layer(22);
  publish(layer, dir);
  train(layer, rng, 1, kItems);
  const int64_t delta = publish(layer, dir).bytes;  // about the size of each of the next ones
  ASSERT_GT(delta, 0);
  const PublishOptions options{
      .base_every_deltas = 0, .base_every_bytes = 2 * delta, .keep_versions = 0};
  int64_t held = delta;
  int bases = 0;
  for (int k = 0; k < 6; ++k) {
    train(layer, rng, 1, kItems);
    const PublishResult result = publish(layer, dir, options);
    if (held >= 2 * delta) {
      EXPECT_EQ(result.sequence, 0) << k;
      EXPECT_THAT(result.base_reason, HasSubstr("(base_every_bytes " + std::to_string(2 * delta)));
      held = 0;
      ++bases;
    } else {
      EXPECT_GT(result.sequence, 0) << k;
      held += result.bytes;
    }
  }
  EXPECT_GE(bases, 1);
  EXPECT_TRUE(std::filesystem::exists(dir / "1" / kModelFileName));  // all kept
  EXPECT_THAT(error_of<InvalidArgument>([&] { publish(layer, dir, {.keep_versions = -1}); }),
              HasSubstr("keep_versions (-1) must be >= 0"));
}

// A directory holding the largest version: no base can follow it. Refused before anything is
// written, instead of a version named -9223372036854775808 that no server reads.
TEST(PublishTest, ADirectoryHoldingTheLargestVersionIsRefused) {
  TemporaryDirectory directory;
  const std::filesystem::path dir = directory / "m";
  std::filesystem::create_directories(dir / "9223372036854775807");
  Embedding layer = make_layer(23);
  EXPECT_THAT(error_of<FailedPrecondition>([&] { publish(layer, dir); }),
              AllOf(HasSubstr("9223372036854775807"), HasSubstr("no base can follow it")));
  EXPECT_EQ(files_in(dir), std::vector<std::string>{});
  std::vector<std::string> entries;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    entries.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(entries, std::vector<std::string>{"9223372036854775807"});
}

// A base replaced by other bytes under its name (another trainer publishing the same version):
// a delta of it could not be applied by any server, so the next publish is a new base, saying
// why; and a base replaced by bytes of the same size is told apart by its header.
TEST(PublishTest, ABaseReplacedByAnotherFileGetsANewBaseNotADelta) {
  TemporaryDirectory directory;
  const std::filesystem::path dir = directory / "m";
  std::mt19937_64 rng(24);
  Embedding layer = make_layer(24);
  Embedding other = make_layer(25);  // the same shape: a file of the same size
  const PublishOptions options{.keep_versions = 0};
  EXPECT_THAT(publish(layer, dir, options).base_reason, HasSubstr("the first publish"));
  export_serving_model(other, directory / "other.recemb");
  ASSERT_EQ(std::filesystem::file_size(directory / "other.recemb"),
            std::filesystem::file_size(dir / "1" / kModelFileName));
  std::filesystem::copy_file(directory / "other.recemb", dir / "1" / kModelFileName,
                             std::filesystem::copy_options::overwrite_existing);
  train(layer, rng, 1, kItems);
  const PublishResult result = publish(layer, dir, options);
  EXPECT_EQ(result.sequence, 0);
  EXPECT_EQ(result.version, 2);
  EXPECT_THAT(result.base_reason,
              AllOf(HasSubstr((dir / "1" / kModelFileName).string()), HasSubstr("replaced since")));
  EXPECT_FALSE(std::filesystem::exists(dir / "1" / delta_file_name(1)));
  train(layer, rng, 1, kItems);
  EXPECT_EQ(publish(layer, dir, options).sequence, 1);  // the new base is its own
  // A base that is gone: a new one too.
  std::filesystem::remove(dir / "2" / kModelFileName);
  EXPECT_THAT(publish(layer, dir, options).base_reason, HasSubstr("is gone"));
}

}  // namespace
}  // namespace recemb

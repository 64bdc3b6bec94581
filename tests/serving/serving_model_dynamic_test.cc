// ServingModel with dynamic tables (docs/serving.md, "Dynamic tables"): export of a trained
// dynamic table, lookups of present and absent keys equal to Embedding::lookup without a
// LookupBatch (bitwise for float32; for float16 / int8, bitwise to an Embedding holding the
// rounded rows), for every combiner, and the table facts (is_dynamic, num_keys).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"
#include "recemb/string_key.h"

#include "kernels/quantized_rows.h"
#include "serving/model_file.h"
#include "serving/serving_scenario.h"
#include "testing/embedding_calls.h"
#include "testing/error_of.h"
#include "testing/files.h"
#include "testing/random_batches.h"
#include "testing/temporary_directory.h"

namespace recemb {
namespace {

using test::Bag;
using test::bitwise_equal;
using test::error_of;
using test::kDtypes;
using test::lookup_activations;
using test::OwnedInput;
using test::TemporaryDirectory;
using ::testing::HasSubstr;

constexpr int64_t kBatch = 6;
constexpr int64_t kItems = 20;
constexpr Combiner kCombiners[] = {Combiner::kSum, Combiner::kMean, Combiner::kSqrtn};

struct DynamicScenario {
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
};

// A dynamic table "user" (bags, one id per example, a sequence feature) beside a static "item".
DynamicScenario make_scenario(Combiner combiner) {
  return {.tables = {{.name = "user",
                      .dim = 6,
                      .optimizer = Adagrad{.learning_rate = 0.5f},
                      .combiner = combiner,
                      .dynamic_vocabulary = DynamicVocabulary{.capacity = 1000}},
                     {.name = "item", .vocabulary_size = kItems, .dim = 3, .combiner = combiner}},
          .features = {{.name = "bags", .table = "user"},
                       {.name = "one", .table = "user"},
                       {.name = "sequence", .table = "user", .max_sequence_length = 3},
                       {.name = "items", .table = "item"}}};
}

Embedding make_layer(const DynamicScenario& s, uint64_t seed) {
  return Embedding(
      s.tables, s.features,
      EmbeddingOptions{.optimizer = Sgd{.learning_rate = 0.1f}, .num_threads = 1, .seed = seed});
}

// Keys drawn from `keys` (uniform, with the repeats and weights of test::random_bags).
std::vector<OwnedInput> random_inputs(std::mt19937_64& rng, const std::vector<int64_t>& keys) {
  const auto to_keys = [&](std::vector<Bag> bags) {
    for (Bag& bag : bags) {
      for (int64_t& id : bag.ids) id = keys[static_cast<size_t>(id)];
    }
    return bags;
  };
  const auto size = static_cast<int64_t>(keys.size());
  const bool weighted = test::random_bool(rng);
  std::vector<OwnedInput> inputs;
  inputs.push_back(OwnedInput::ragged(
      to_keys(test::random_bags(rng, kBatch, {.vocabulary_size = size, .max_length = 6})),
      weighted));
  inputs.push_back(OwnedInput::dense_from_bags(
      to_keys(test::random_bags(rng, kBatch,
                                {.vocabulary_size = size, .min_length = 1, .max_length = 1})),
      {kBatch}, weighted));
  inputs.push_back(OwnedInput::dense_from_bags(
      to_keys(test::random_bags(rng, kBatch,
                                {.vocabulary_size = size, .min_length = 4, .max_length = 4})),
      {kBatch}, weighted));
  inputs.push_back(test::random_two_dim_input(rng, kBatch, kItems, 4));
  return inputs;
}

// `count` distinct keys: the int64 extremes, 0 and -1, and random ones.
std::vector<int64_t> random_keys(std::mt19937_64& rng, size_t count) {
  std::vector<int64_t> keys = {std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max(), 0, -1};
  while (keys.size() < count) {
    const auto key = static_cast<int64_t>(rng()) >> (rng() % 60);  // small and large magnitudes
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  std::shuffle(keys.begin(), keys.end(), rng);
  return keys;
}

// Trains `layer` for a few steps on the first `trained` keys of `keys`, which admits them.
void train_on(Embedding& layer, std::mt19937_64& rng, const std::vector<int64_t>& keys,
              size_t trained) {
  const std::vector<int64_t> seen(keys.begin(),
                                  keys.begin() + static_cast<std::ptrdiff_t>(trained));
  LookupBatch batch;
  for (int step = 0; step < 4; ++step) {
    const std::vector<std::vector<float>> activations =
        test::look_up(layer, random_inputs(rng, seen), batch);
    std::vector<std::vector<float>> gradients;
    for (const std::vector<float>& activation : activations) {
      gradients.push_back(test::random_gradient(rng, activation.size()));
    }
    test::train(layer, batch, gradients);
  }
}

// Each row of `rows` ([n, dim]) as `dtype` stores it, decoded (kernels/quantized_rows.h).
std::vector<float> stored_values(ServingDtype dtype, const std::vector<float>& rows, int64_t dim) {
  const auto n = static_cast<int64_t>(rows.size()) / dim;
  std::vector<float> values(rows.size());
  if (dtype == ServingDtype::kFloat32) return rows;
  if (dtype == ServingDtype::kFloat16) {
    std::vector<uint16_t> halves(rows.size());
    EXPECT_EQ(internal::encode_float16_rows(rows.data(), n, dim, halves.data()), std::nullopt);
    std::transform(halves.begin(), halves.end(), values.begin(), internal::float16_to_float);
    return values;
  }
  std::vector<uint8_t> codes(static_cast<size_t>(n * internal::int8_row_bytes(dim)));
  EXPECT_EQ(internal::encode_int8_rows(rows.data(), n, dim, codes.data()), std::nullopt);
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = codes.data() + r * internal::int8_row_bytes(dim);
    const internal::Int8RowParameters p = internal::int8_row_parameters(row, dim);
    for (int64_t d = 0; d < dim; ++d) {
      values[static_cast<size_t>(r * dim + d)] = static_cast<float>(row[d]) * p.scale + p.bias;
    }
  }
  return values;
}

// `keys` with `rows` for the "user" table of `layer`, its Adagrad accumulators at 0.1.
DynamicTableContents contents_of(const Embedding& layer, std::vector<int64_t> keys,
                                 std::vector<float> rows) {
  DynamicTableContents contents = layer.read_dynamic_table("user");
  for (auto& [name, values] : contents.slots) values.assign(rows.size(), 0.1f);
  contents.keys = std::move(keys);
  contents.parameters = std::move(rows);
  return contents;
}

class ServingDynamicTest : public ::testing::TestWithParam<std::tuple<ServingDtype, Combiner>> {};

TEST_P(ServingDynamicTest, LookupsOfPresentAndAbsentKeysEqualTheEmbeddingsPureLookup) {
  const auto [dtype, combiner] = GetParam();
  const uint64_t seed = 211 + 10 * static_cast<uint64_t>(dtype) + static_cast<uint64_t>(combiner);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const DynamicScenario scenario = make_scenario(combiner);
  Embedding layer = make_layer(scenario, seed);
  // 60 keys: the first 40 trained (admitted), the other 20 never seen.
  const std::vector<int64_t> keys = random_keys(rng, 60);
  train_on(layer, rng, keys, 40);
  const DynamicTableContents contents = layer.read_dynamic_table("user");
  ASSERT_GT(contents.keys.size(), 20u);
  ASSERT_LE(contents.keys.size(), 40u);

  const TemporaryDirectory directory;
  export_serving_model(layer, directory / "model.recemb", {.dtype = dtype});
  const ServingModel model = ServingModel::open(directory / "model.recemb");
  EXPECT_TRUE(model.is_dynamic("user"));
  EXPECT_FALSE(model.is_dynamic("item"));
  EXPECT_EQ(model.num_keys("user"), static_cast<int64_t>(contents.keys.size()));
  ASSERT_TRUE(model.tables()[0].dynamic_vocabulary.has_value());
  EXPECT_EQ(model.tables()[0].dynamic_vocabulary->capacity, 1000);
  EXPECT_EQ(model.tables()[0].vocabulary_size, 0);
  EXPECT_FALSE(model.tables()[0].optimizer.has_value());

  // The Embedding that holds what the file stores: the exported one for float32; else a fresh
  // one given the rounded rows of the same keys.
  Embedding rounded = make_layer(scenario, seed + 1);
  if (dtype != ServingDtype::kFloat32) {
    DynamicTableContents stored = contents;
    stored.parameters = stored_values(dtype, contents.parameters, 6);
    rounded.write_dynamic_table("user", stored);
    rounded.write_variable("item", "parameters",
                           stored_values(dtype, test::read(layer, "item", "parameters"), 3));
  }
  Embedding& expected_layer = dtype == ServingDtype::kFloat32 ? layer : rounded;

  // Every key of the pool (trained, never seen) and as many fresh random ones (absent).
  std::vector<int64_t> probes = keys;
  const std::vector<int64_t> fresh = random_keys(rng, 64);
  probes.insert(probes.end(), fresh.begin(), fresh.end());
  for (int batch = 0; batch < 10; ++batch) {
    const std::vector<OwnedInput> inputs = random_inputs(rng, probes);
    const std::vector<FeatureInput> views = test::views_of(inputs);
    const std::vector<std::vector<float>> served = lookup_activations(model, views);
    const std::vector<std::vector<float>> expected = lookup_activations(expected_layer, views);
    for (size_t f = 0; f < views.size(); ++f) {
      EXPECT_TRUE(bitwise_equal(served[f], expected[f])) << "batch " << batch << " feature " << f;
    }
  }
  // The pure lookups inserted nothing.
  EXPECT_EQ(layer.vocabulary_stats("user").size, static_cast<int64_t>(contents.keys.size()));
}

INSTANTIATE_TEST_SUITE_P(DtypesAndCombiners, ServingDynamicTest,
                         ::testing::Combine(::testing::ValuesIn(kDtypes),
                                            ::testing::ValuesIn(kCombiners)),
                         [](const auto& test_info) {
                           return std::string(serving_dtype_name(std::get<0>(test_info.param))) +
                                  "_" + std::string(combiner_name(std::get<1>(test_info.param)));
                         });

// The rule itself, independently of the Embedding: an absent key is a zero row whose weight
// counts in the mean (row * 1 / (1 + 3)).
TEST(ServingDynamicTest, AnAbsentKeyIsAZeroRowWhoseWeightCountsInTheMean) {
  const DynamicScenario scenario = make_scenario(Combiner::kMean);
  Embedding layer = make_layer(scenario, 5);
  std::mt19937_64 rng(5);
  std::vector<float> row(6);
  for (float& value : row) value = std::uniform_real_distribution<float>(-1, 1)(rng);
  layer.write_dynamic_table("user", contents_of(layer, {-42}, row));
  const TemporaryDirectory directory;
  export_serving_model(layer, directory / "model.recemb");
  const ServingModel model = ServingModel::open(directory / "model.recemb");
  const std::vector<OwnedInput> inputs = {
      OwnedInput::ragged(
          {{.ids = {-42, 7}, .weights = {1.0f, 3.0f}}, {.ids = {7}, .weights = {2.0f}}}, true),
      OwnedInput::dense({42}, {1}), OwnedInput::dense({-42, 8, 9}, {1, 3}),
      OwnedInput::dense({0}, {1})};
  const std::vector<std::vector<float>> out = lookup_activations(model, test::views_of(inputs));
  std::vector<float> expected_bags(12, 0.0f);
  for (size_t d = 0; d < 6; ++d) expected_bags[d] = row[d] * 0.25f;
  EXPECT_TRUE(bitwise_equal(out[0], expected_bags));
  EXPECT_TRUE(bitwise_equal(out[1], std::vector<float>(6, 0.0f)));
  std::vector<float> expected_sequence(18, 0.0f);
  std::copy(row.begin(), row.end(), expected_sequence.begin());
  EXPECT_TRUE(bitwise_equal(out[2], expected_sequence));
}

TEST(ServingDynamicTest, AnEmptyDynamicTableLooksUpZeroRows) {
  const DynamicScenario scenario = make_scenario(Combiner::kSum);
  Embedding layer = make_layer(scenario, 6);
  const TemporaryDirectory directory;
  for (const ServingDtype dtype : kDtypes) {
    export_serving_model(layer, directory / "model.recemb", {.dtype = dtype});
    const ServingModel model = ServingModel::open(directory / "model.recemb");
    EXPECT_EQ(model.num_keys("user"), 0);
    std::mt19937_64 rng(6);
    const std::vector<OwnedInput> inputs = random_inputs(rng, random_keys(rng, 10));
    const std::vector<std::vector<float>> out = lookup_activations(model, test::views_of(inputs));
    for (size_t f = 0; f < 3; ++f) {
      EXPECT_TRUE(bitwise_equal(out[f], std::vector<float>(out[f].size(), 0.0f)));
    }
  }
}

TEST(ServingDynamicTest, TableFactsNameTheTable) {
  const DynamicScenario scenario = make_scenario(Combiner::kSum);
  Embedding layer = make_layer(scenario, 7);
  const TemporaryDirectory directory;
  export_serving_model(layer, directory / "model.recemb");
  const ServingModel model = ServingModel::open(directory / "model.recemb");
  EXPECT_THAT(error_of<InvalidArgument>([&] { model.num_keys("item"); }),
              HasSubstr("table 'item' is not dynamic"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { model.is_dynamic("nope"); }),
              HasSubstr("has no table 'nope' (it has 'user', 'item')"));
}

// A value the dtype cannot hold is named by its key, not a row number.
TEST(ServingDynamicTest, AnUnstorableValueIsNamedByItsKey) {
  const DynamicScenario scenario = make_scenario(Combiner::kSum);
  Embedding layer = make_layer(scenario, 8);
  std::vector<float> rows(12, 0.5f);
  rows[9] = 1e6f;
  layer.write_dynamic_table("user", contents_of(layer, {-3, 77}, rows));
  const TemporaryDirectory directory;
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                export_serving_model(layer, directory / "model.recemb",
                                     {.dtype = ServingDtype::kFloat16});
              }),
              HasSubstr("table 'user' key 77 column 3: value 1e+06"));
  EXPECT_FALSE(std::filesystem::exists(directory / "model.recemb"));
}

// The layout docs/serving.md specifies for a dynamic table: its keys blob (int64, increasing)
// before its rows blob of num_keys + 1 rows, the last one zero; and the manifest and key checks of
// ServingModel::open (DataLoss naming the file and the table).
TEST(ServingDynamicFileTest, KeysAndRowsAreLaidOutAndChecked) {
  const DynamicScenario scenario = make_scenario(Combiner::kSum);
  Embedding layer = make_layer(scenario, 9);
  std::vector<float> rows(18);
  std::mt19937_64 rng(9);
  for (float& value : rows) value = std::uniform_real_distribution<float>(-1, 1)(rng);
  const std::vector<int64_t> keys = {std::numeric_limits<int64_t>::min(), -5, 1LL << 40};
  layer.write_dynamic_table("user", contents_of(layer, keys, rows));
  const TemporaryDirectory directory;
  const std::filesystem::path good = directory / "model.recemb";
  const std::filesystem::path damaged = directory / "damaged.recemb";
  export_serving_model(layer, good);
  const test::ModelFile file = test::ModelFile::read(good);
  EXPECT_EQ(file.format_version, 3u);
  const test::ModelFile::Blob& user = file.blobs[0];
  EXPECT_EQ(user.keys_size, 24u);
  EXPECT_EQ(user.keys_offset, file.data_offset());  // the first blob
  EXPECT_EQ(user.offset, user.keys_offset + 64);
  EXPECT_EQ(user.size, 4u * 6 * 4);  // three keys' rows and the zero row
  std::vector<int64_t> stored_keys(3);
  std::memcpy(stored_keys.data(), file.bytes.data() + user.keys_offset, 24);
  EXPECT_EQ(stored_keys, keys);
  std::vector<float> expected = rows;
  expected.resize(24, 0.0f);
  EXPECT_TRUE(bitwise_equal(file.decode(0), expected));
  EXPECT_EQ(file.blobs[1].keys_size, 0u);

  const auto expect_rejected = [&](const std::vector<std::byte>& bytes, bool verify,
                                   const std::string& fragment) {
    test::write_bytes(damaged, bytes);
    EXPECT_THAT(error_of<DataLoss>([&] { ServingModel::open(damaged, {.verify = verify}); }),
                ::testing::AllOf(HasSubstr("serving model '" + damaged.string() + "'"),
                                 HasSubstr(fragment)));
  };
  const std::vector<std::byte> data = file.data_section();
  const auto rebuilt = [&](const std::function<void(support::Json&)>& edit, uint32_t version = 3) {
    support::Json manifest = file.manifest;
    edit(manifest);
    return test::build_model_file(manifest.dump(), data, version);
  };
  // The rebuilt file itself is good.
  test::write_bytes(damaged, rebuilt([](support::Json&) {}));
  EXPECT_EQ(ServingModel::open(damaged).num_keys("user"), 3);

  expect_rejected(rebuilt([](support::Json&) {}, 2), false,
                  "a dynamic table in a file of format version 2 (dynamic tables need version 3)");
  expect_rejected(rebuilt([](auto& m) { m["tables"][0].erase("keys"); }), false,
                  "a dynamic table needs its \"keys\" blob");
  expect_rejected(rebuilt([](auto& m) { m["tables"][1]["keys"] = m["tables"][0]["keys"]; }), false,
                  "only a dynamic table has a \"keys\" blob");
  expect_rejected(rebuilt([](auto& m) { m["tables"][0]["keys"]["size"] = 20; }), false,
                  "table 'user' keys: blob size 20 is not a multiple of 8");
  expect_rejected(rebuilt([](auto& m) { m["tables"][0]["keys"]["size"] = 32; }), false,
                  "table 'user': blob size 96 is not 4 keys + 1 zero row");

  // Keys out of order are refused whether or not blobs are verified; with verify, as damage.
  std::vector<std::byte> swapped = file.bytes;
  std::memcpy(swapped.data() + user.keys_offset, &keys[1], 8);
  std::memcpy(swapped.data() + user.keys_offset + 8, &keys[0], 8);
  expect_rejected(swapped, true, "table 'user' keys: the checksum does not match");
  expect_rejected(swapped, false,
                  "table 'user': keys[1] = -9223372036854775808 is not greater than keys[0] = -5");
}

// tests/data/serving-v3 holds a model of each dtype written by format version 3 (the first with
// dynamic tables), which must keep loading. Tables: "items" [4, 3], mean, row r column c =
// (3 r + c) / 4 - 1; "users" dynamic, dim 2, sqrtn, keys -7: {-0.5, 0.25}, 3: {1, -1}, 2^40:
// {0.75, 0.5}, string_key("ann") = 5200682613324210888: {-0.25, 2} (every value exact in
// float16). Features: "clicks" (items), "friends" (users), "recent" (users, max_sequence_length
// 2). Metadata {"model": "golden-v3"}; no extra arrays. Written by the Python bindings
// (Embedding.write_dynamic_table, then export_serving_model with ExportOptions(metadata=...)).
class ServingGoldenV3Test : public ::testing::TestWithParam<ServingDtype> {};

TEST_P(ServingGoldenV3Test, ReadsTheCheckedInModels) {
  const ServingDtype dtype = GetParam();
  const std::filesystem::path path =
      test::checked_in_data_dir() / "serving-v3" /
      ("model-" + std::string(serving_dtype_name(dtype)) + ".recemb");
  EXPECT_EQ(test::ModelFile::read(path).format_version, 3u);
  const ServingModel model = ServingModel::open(path);
  EXPECT_EQ(model.dtype(), dtype);
  EXPECT_EQ(model.metadata(), (std::map<std::string, std::string>{{"model", "golden-v3"}}));
  EXPECT_FALSE(model.is_dynamic("items"));
  EXPECT_TRUE(model.is_dynamic("users"));
  EXPECT_EQ(model.num_keys("users"), 4);
  EXPECT_EQ(model.tables()[1].dynamic_vocabulary->capacity, 8);
  EXPECT_EQ(model.tables()[1].combiner, Combiner::kSqrtn);
  const int64_t ann = string_key("ann");
  EXPECT_EQ(ann, 5200682613324210888);
  // clicks {0, 3} {2}; friends {3: 3, ann: 4, 5 (absent): 1} {}; recent {2^40, -7, 99} {-7}.
  const std::vector<OwnedInput> inputs = {
      OwnedInput::ragged({{{0, 3}, {}}, {{2}, {}}}, false),
      OwnedInput::ragged({{{3, ann, 5}, {3.0f, 4.0f, 1.0f}}, {{}, {}}}, true),
      OwnedInput::ragged({{{int64_t{1} << 40, -7, 99}, {}}, {{-7}, {}}}, false)};
  const std::vector<std::vector<float>> actual = lookup_activations(model, test::views_of(inputs));
  const auto item = [](int c, int r) { return (3.0 * r + c) / 4 - 1; };
  const std::vector<double> row_3 = {1, -1}, row_ann = {-0.25, 2}, row_big = {0.75, 0.5},
                            row_minus_7 = {-0.5, 0.25};
  std::vector<std::vector<double>> expected(3);
  for (int c = 0; c < 3; ++c) expected[0].push_back((item(c, 0) + item(c, 3)) / 2);
  for (int c = 0; c < 3; ++c) expected[0].push_back(item(c, 2));
  for (size_t c = 0; c < 2; ++c) {
    expected[1].push_back((3 * row_3[c] + 4 * row_ann[c]) / std::sqrt(26.0));
  }
  expected[1].resize(4, 0.0);
  expected[2] = {
      row_big[0], row_big[1], row_minus_7[0], row_minus_7[1], row_minus_7[0], row_minus_7[1],
      0.0,        0.0};
  // float32 and float16 hold every value exactly; int8 within half a code step of its row's range
  // (at most 2.25 / 255 / 2), combined.
  const double tolerance = dtype == ServingDtype::kInt8 ? 0.01 : 1e-6;
  for (size_t f = 0; f < expected.size(); ++f) {
    ASSERT_EQ(actual[f].size(), expected[f].size()) << f;
    for (size_t i = 0; i < expected[f].size(); ++i) {
      EXPECT_NEAR(actual[f][i], expected[f][i], tolerance) << "feature " << f << " value " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, ServingGoldenV3Test, ::testing::ValuesIn(kDtypes),
                         [](const auto& test_info) {
                           return std::string(serving_dtype_name(test_info.param));
                         });

}  // namespace
}  // namespace recemb

// 16-bit tables (TableConfig::dtype bfloat16 / float16; docs/semantics.md, "16-bit tables"),
// against independent references: the float32 table's rows rounded to nearest, lookups as float64
// sums of the decoded rows, and training as a float64 update followed by the documented rounding
// (computed here from the format's grid, with the documented counter-based generator's bits).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"
#include "recemb/error.h"

#include "kernels/half_precision.h"
#include "reference/half_grid.h"
#include "storage/initializer.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"

namespace recemb {
namespace {

using reference::Neighbours;
using reference::neighbours;
using reference::round_stochastically;
using reference::round_to_nearest;
using ::testing::HasSubstr;

constexpr int64_t kRows = 64;
constexpr int64_t kDim = 16;
constexpr int64_t kBatch = 48;
constexpr int64_t kBag = 4;
constexpr uint64_t kSeed = 17;

Embedding make_layer(DType dtype, Optimizer optimizer, int threads,
                     std::optional<PlacementOptions> placement = {},
                     Rounding rounding = Rounding::kStochastic) {
  return Embedding({{.name = "t",
                     .vocabulary_size = kRows,
                     .dim = kDim,
                     .initializer = TruncatedNormal{.mean = 0.0f, .stddev = 0.5f},
                     .combiner = Combiner::kSum,
                     .dtype = dtype,
                     .rounding = rounding}},
                   {{.name = "f", .table = "t"}},
                   {.optimizer = optimizer,
                    .num_threads = threads,
                    .seed = kSeed,
                    .placement = std::move(placement)});
}

std::vector<float> read_parameters(const Embedding& layer) {
  std::vector<float> values(static_cast<size_t>(kRows * kDim));
  layer.read_variable("t", "parameters", values);
  return values;
}

// Random ids and weights for a few steps, and the activations' gradients.
struct Steps {
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<float>> gradients;
};

Steps random_steps(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> id(0, kRows - 1);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  Steps steps;
  for (int s = 0; s < count; ++s) {
    auto& ids = steps.ids.emplace_back(static_cast<size_t>(kBatch * kBag));
    auto& weights = steps.weights.emplace_back(ids.size());
    auto& gradients = steps.gradients.emplace_back(static_cast<size_t>(kBatch * kDim));
    for (auto& x : ids) x = id(rng);
    for (auto& x : weights) x = value(rng);
    for (auto& x : gradients) x = value(rng);
  }
  return steps;
}

// Looks up step s's ids and applies its gradients; returns the activations.
std::vector<float> train_step(Embedding& layer, const Steps& steps, size_t s) {
  std::vector<float> activations(static_cast<size_t>(kBatch * kDim));
  LookupBatch batch;
  const std::vector<FeatureInput> inputs{DenseIds{.ids = std::span<const int64_t>(steps.ids[s]),
                                                  .shape = {kBatch, kBag},
                                                  .weights = steps.weights[s]}};
  const std::vector<std::span<float>> outputs{activations};
  layer.lookup(inputs, outputs, batch);
  const std::vector<std::span<const float>> gradients{steps.gradients[s]};
  layer.apply_gradients(batch, gradients);
  return activations;
}

class EmbeddingHalf : public ::testing::TestWithParam<DType> {};

TEST_P(EmbeddingHalf, InitialRowsAreTheFloat32TablesRoundedToNearest) {
  const DType dtype = GetParam();
  const std::vector<float> half = read_parameters(make_layer(dtype, Sgd{}, 1));
  const std::vector<float> full = read_parameters(make_layer(DType::kFloat32, Sgd{}, 1));
  for (size_t i = 0; i < half.size(); ++i) {
    ASSERT_EQ(half[i], round_to_nearest(dtype, full[i])) << "value " << i;
  }
}

TEST_P(EmbeddingHalf, LookupsSumTheDecodedRows) {
  const DType dtype = GetParam();
  Embedding layer = make_layer(dtype, Sgd{.learning_rate = 0.0f}, 2);
  const std::vector<float> rows = read_parameters(layer);
  const Steps steps = random_steps(1, 3);
  const std::vector<float> activations = train_step(layer, steps, 0);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t d = 0; d < kDim; ++d) {
      double sum = 0.0;
      for (int64_t j = b * kBag; j < (b + 1) * kBag; ++j) {
        sum += double{steps.weights[0][static_cast<size_t>(j)]} *
               rows[static_cast<size_t>(steps.ids[0][static_cast<size_t>(j)] * kDim + d)];
      }
      EXPECT_NEAR(activations[static_cast<size_t>(b * kDim + d)], sum,
                  1e-5 * (1.0 + std::fabs(sum)));
    }
  }
}

// SGD: each row's summed gradient in float64, w - lr g in float64, then the documented rounding
// with the bits of (table seed, step, row, column). The engine computes in float32, so a value
// whose float32 and float64 results straddle the rounding's threshold may differ: by one step of
// the grid, for a few values at most.
TEST_P(EmbeddingHalf, SgdStepsAreTheFloat64UpdateThenTheDocumentedRounding) {
  const DType dtype = GetParam();
  constexpr float kLearningRate = 0.05f;
  Embedding layer = make_layer(dtype, Sgd{.learning_rate = kLearningRate}, 2);
  const std::vector<float> initial = read_parameters(layer);
  std::vector<double> expected(initial.begin(), initial.end());
  const uint64_t table_seed = internal::table_seed(kSeed, "t");
  const Steps steps = random_steps(5, 4);
  int64_t off_by_one_step = 0;
  for (size_t s = 0; s < steps.ids.size(); ++s) {
    std::vector<double> gradient(expected.size(), 0.0);
    std::vector<bool> touched(static_cast<size_t>(kRows), false);
    for (int64_t j = 0; j < kBatch * kBag; ++j) {
      const int64_t row = steps.ids[s][static_cast<size_t>(j)];
      touched[static_cast<size_t>(row)] = true;
      for (int64_t d = 0; d < kDim; ++d) {
        gradient[static_cast<size_t>(row * kDim + d)] +=
            double{steps.weights[s][static_cast<size_t>(j)]} *
            steps.gradients[s][static_cast<size_t>(j / kBag * kDim + d)];
      }
    }
    for (int64_t row = 0; row < kRows; ++row) {
      if (!touched[static_cast<size_t>(row)]) continue;
      const uint64_t stream = internal::rounding_stream(table_seed, static_cast<int64_t>(s), row);
      for (int64_t d = 0; d < kDim; ++d) {
        double& w = expected[static_cast<size_t>(row * kDim + d)];
        w = round_stochastically(
            dtype,
            static_cast<float>(w - double{kLearningRate} *
                                       gradient[static_cast<size_t>(row * kDim + d)]),
            reference::rounding_bits(stream, d));
      }
    }
    train_step(layer, steps, s);
    const std::vector<float> actual = read_parameters(layer);
    for (size_t i = 0; i < actual.size(); ++i) {
      if (actual[i] == expected[i]) continue;
      const Neighbours n = neighbours(dtype, expected[i]);
      const double gap = std::fabs(n.hi - n.lo);
      ASSERT_LE(std::fabs(actual[i] - expected[i]), gap * 1.0000001)
          << "step " << s << ", value " << i;
      ++off_by_one_step;
      expected[i] = actual[i];  // follow the engine from here
    }
  }
  EXPECT_LE(off_by_one_step, 3) << "of " << steps.ids.size() * kRows * kDim;
}

// Stochastic rounding keeps the small updates that rounding to nearest loses: many SGD steps of a
// gradient far below half a step of the grid move a bfloat16 row as a float64 one moves, while
// rounding to nearest leaves it where it was.
TEST_P(EmbeddingHalf, StochasticRoundingKeepsSmallUpdatesThatNearestLoses) {
  const DType dtype = GetParam();
  constexpr int kSteps = 400;
  constexpr float kLearningRate = 1e-4f;
  const auto run = [&](Rounding rounding) {
    Embedding layer = make_layer(dtype, Sgd{.learning_rate = kLearningRate}, 1, {}, rounding);
    std::vector<float> ones(static_cast<size_t>(kRows * kDim), 1.0f);
    layer.write_variable("t", "parameters", ones);
    std::vector<int64_t> ids(static_cast<size_t>(kRows));
    for (int64_t r = 0; r < kRows; ++r) ids[static_cast<size_t>(r)] = r;
    const std::vector<float> gradient(static_cast<size_t>(kRows * kDim), 1.0f);
    std::vector<float> activations(gradient.size());
    for (int s = 0; s < kSteps; ++s) {
      LookupBatch batch;
      const std::vector<FeatureInput> inputs{
          DenseIds{.ids = std::span<const int64_t>(ids), .shape = {kRows, 1}}};
      const std::vector<std::span<float>> outputs{activations};
      layer.lookup(inputs, outputs, batch);
      const std::vector<std::span<const float>> gradients{gradient};
      layer.apply_gradients(batch, gradients);
    }
    double mean = 0.0;
    for (const float v : read_parameters(layer)) mean += v;
    return mean / static_cast<double>(kRows * kDim);
  };
  // Each step subtracts 1e-4 from 1.0: a float64 row ends at 0.96. Near 1 the grid's steps are
  // 2^-8 below and 2^-7 above (bfloat16), 2^-11 and 2^-10 (float16): 1 - 1e-4 rounds to nearest as
  // 1, so nearest never moves, while stochastic rounding moves on average as float64 does (each
  // value's spread after 400 steps is at most 20 half-steps; the mean of 1024 values, 1/32 of it).
  const double exact = 1.0 - kSteps * double{kLearningRate};
  EXPECT_NEAR(run(Rounding::kStochastic), exact, 0.005);
  EXPECT_EQ(run(Rounding::kNearest), 1.0);
}

// The same rows for any thread count and placement: rounding is keyed by the table's row and
// column, not by where a part holds them. (Activations are bitwise the same for any thread count;
// a row-wise placement sums a bag's parts apart, which equals one part to float rounding only.)
TEST_P(EmbeddingHalf, BitwiseIdenticalForAnyThreadCountAndPlacement) {
  const DType dtype = GetParam();
  const Steps steps = random_steps(4, 5);
  struct Result {
    std::vector<float> activations;
    std::vector<float> variables;
  };
  const auto run = [&](int threads, std::optional<PlacementOptions> placement) {
    Embedding layer =
        make_layer(dtype, Adagrad{.learning_rate = 0.1f, .initial_accumulator_value = 0.1f},
                   threads, std::move(placement));
    Result result;
    for (size_t s = 0; s < steps.ids.size(); ++s) {
      const std::vector<float> activations = train_step(layer, steps, s);
      result.activations.insert(result.activations.end(), activations.begin(), activations.end());
    }
    result.variables = read_parameters(layer);
    std::vector<float> accumulators(result.variables.size());
    layer.read_variable("t", "accumulators", accumulators);
    result.variables.insert(result.variables.end(), accumulators.begin(), accumulators.end());
    return result;
  };
  const Result one = run(1, {});
  for (const int threads : {2, 3}) {
    const Result other = run(threads, {});
    EXPECT_EQ(other.activations, one.activations) << threads << " threads";
    EXPECT_EQ(other.variables, one.variables) << threads << " threads";
  }
  for (const ShardingStrategy strategy :
       {ShardingStrategy::kRowWise, ShardingStrategy::kColumnWise}) {
    const Result other = run(2, PlacementOptions{.num_shards = 2, .strategy = strategy});
    EXPECT_EQ(other.variables, one.variables) << sharding_strategy_name(strategy);
  }
}

TEST_P(EmbeddingHalf, VariableDataOfTheRowsRefersToReadVariable) {
  const DType dtype = GetParam();
  Embedding layer = make_layer(dtype, Sgd{}, 1);
  try {
    layer.variable_data("t", "parameters");
    FAIL() << "no throw";
  } catch (const FailedPrecondition& error) {
    EXPECT_THAT(error.what(), HasSubstr("stores its rows as " + std::string(dtype_name(dtype))));
    EXPECT_THAT(error.what(), HasSubstr("read_variable"));
  }
}

// half_parameter_data: the table's 16-bit values themselves (decoding them gives read_variable's
// values; a value written there is what lookups read); refused for a float32 table and for one
// split into shards.
TEST_P(EmbeddingHalf, HalfParameterDataIsTheRowsThemselves) {
  const DType dtype = GetParam();
  Embedding layer = make_layer(dtype, Sgd{}, 1);
  const std::span<uint16_t> rows = layer.half_parameter_data("t");
  ASSERT_EQ(rows.size(), static_cast<size_t>(kRows * kDim));
  EXPECT_EQ(std::as_const(layer).half_parameter_data("t").data(), rows.data());
  const std::vector<float> read = read_parameters(layer);
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(reference::value_of(dtype, rows[i]), read[i]) << i;
  }
  rows[3 * kDim + 2] = dtype == DType::kBFloat16 ? 0x4040 : 0x4200;  // 3.0 in either type
  EXPECT_EQ(read_parameters(layer)[3 * kDim + 2], 3.0f);

  Embedding full = make_layer(DType::kFloat32, Sgd{}, 1);
  EXPECT_THAT([&] { full.half_parameter_data("t"); },
              ::testing::ThrowsMessage<FailedPrecondition>(
                  HasSubstr("stores its rows as float32: use variable_data")));
  Embedding sharded = make_layer(
      dtype, Sgd{}, 1, PlacementOptions{.num_shards = 2, .strategy = ShardingStrategy::kRowWise});
  EXPECT_THAT([&] { sharded.half_parameter_data("t"); },
              ::testing::ThrowsMessage<FailedPrecondition>(HasSubstr("not held whole")));
  EXPECT_THAT([&] { layer.half_parameter_data("u"); }, ::testing::Throws<InvalidArgument>());
}

TEST_P(EmbeddingHalf, WriteVariableRoundsToNearestAndRefusesWhatTheTypeCannotHold) {
  const DType dtype = GetParam();
  Embedding layer = make_layer(dtype, Sgd{}, 1);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  std::vector<float> values(static_cast<size_t>(kRows * kDim));
  for (float& v : values) v = value(rng);
  layer.write_variable("t", "parameters", values);
  const std::vector<float> read = read_parameters(layer);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(read[i], round_to_nearest(dtype, values[i]));
  if (dtype == DType::kFloat16) {
    std::vector<float> too_large = values;
    too_large[5] = 70000.0f;
    EXPECT_THAT([&] { layer.write_variable("t", "parameters", too_large); },
                ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("beyond float16's range")));
    EXPECT_EQ(read_parameters(layer), read);  // nothing changed
  }
}

// The 16-bit values a checkpoint's parameters file holds, decoded by the format's definition.
std::vector<float> saved_parameters(const std::filesystem::path& checkpoint, DType dtype) {
  const std::string extension = dtype == DType::kBFloat16 ? ".bf16" : ".f16";
  const std::vector<std::byte> bytes = test::read_bytes(checkpoint / ("t0.parameters" + extension));
  EXPECT_EQ(bytes.size(), static_cast<size_t>(kRows * kDim) * 2);  // 2 bytes a value, as they are
  std::vector<uint16_t> halves(bytes.size() / 2);
  std::memcpy(halves.data(), bytes.data(), halves.size() * 2);
  std::vector<float> values;
  for (const uint16_t bits : halves) {
    values.push_back(static_cast<float>(reference::value_of(dtype, bits)));
  }
  return values;
}

TEST_P(EmbeddingHalf, CheckpointsRoundTripAndAnotherDTypeNeedsConvertDType) {
  const DType dtype = GetParam();
  const test::TemporaryDirectory dir;
  Embedding layer = make_layer(dtype, Adagrad{.learning_rate = 0.1f}, 2);
  const Steps steps = random_steps(2, 6);
  train_step(layer, steps, 0);
  const std::filesystem::path checkpoint = save_checkpoint(layer, dir.path());
  const std::vector<float> at_save = read_parameters(layer);
  EXPECT_EQ(saved_parameters(checkpoint, dtype), at_save);
  EXPECT_EQ(inspect_checkpoint(checkpoint).format_version, 3);
  Embedding restored =
      make_layer(dtype, Adagrad{.learning_rate = 0.1f}, 1,
                 PlacementOptions{.num_shards = 2, .strategy = ShardingStrategy::kRowWise});
  restore_checkpoint(restored, dir.path());
  EXPECT_EQ(read_parameters(restored), read_parameters(layer));
  // Training on from the restored state (in another placement) is training on from the saved one.
  train_step(restored, steps, 1);
  train_step(layer, steps, 1);
  EXPECT_EQ(read_parameters(restored), read_parameters(layer));

  Embedding full = make_layer(DType::kFloat32, Adagrad{.learning_rate = 0.1f}, 1);
  EXPECT_THAT([&] { restore_checkpoint(full, dir.path()); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("rows are " + std::string(dtype_name(dtype)) +
                            ", the embedding's float32; set RestoreOptions::convert_dtype")));
  restore_checkpoint(full, dir.path(), {.convert_dtype = true});
  EXPECT_EQ(read_parameters(full), at_save);  // the 16-bit values, widened exactly

  // Into the other 16-bit type: each value rounded to nearest.
  const DType other = dtype == DType::kBFloat16 ? DType::kFloat16 : DType::kBFloat16;
  Embedding converted = make_layer(other, Adagrad{.learning_rate = 0.1f}, 1);
  restore_checkpoint(converted, dir.path(), {.convert_dtype = true});
  const std::vector<float> values = read_parameters(converted);
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(values[i], round_to_nearest(other, at_save[i])) << i;
  }
}

// Saved by parts (row-wise and column-wise shards of a 16-bit table), each rank writing its rows
// and columns at their places: the same file as a whole table's, restored into another placement.
TEST_P(EmbeddingHalf, ShardedPartsSaveTheWholeTable) {
  const DType dtype = GetParam();
  const Steps steps = random_steps(2, 8);
  Embedding whole = make_layer(dtype, Adagrad{.learning_rate = 0.1f}, 1);
  train_step(whole, steps, 0);
  const test::TemporaryDirectory whole_dir;
  const std::vector<float> expected =
      saved_parameters(save_checkpoint(whole, whole_dir.path()), dtype);
  for (const ShardingStrategy strategy :
       {ShardingStrategy::kRowWise, ShardingStrategy::kColumnWise}) {
    Embedding sharded = make_layer(dtype, Adagrad{.learning_rate = 0.1f}, 2,
                                   PlacementOptions{.num_shards = 2, .strategy = strategy});
    train_step(sharded, steps, 0);
    const test::TemporaryDirectory dir;
    EXPECT_EQ(saved_parameters(save_checkpoint(sharded, dir.path()), dtype), expected);
    Embedding restored = make_layer(dtype, Adagrad{.learning_rate = 0.1f}, 1);
    restore_checkpoint(restored, dir.path());
    EXPECT_EQ(read_parameters(restored), read_parameters(whole));
  }
}

// A float32 checkpoint converted into a 16-bit table: each value rounded to nearest; into
// float16, a value it cannot hold is an error naming it, with nothing changed.
TEST_P(EmbeddingHalf, AFloat32CheckpointConvertsToNearestAndFloat16RefusesWhatItCannotHold) {
  const DType dtype = GetParam();
  Embedding full = make_layer(DType::kFloat32, Adagrad{.learning_rate = 0.1f}, 1);
  std::vector<float> values = read_parameters(full);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  for (float& value : values) value = uniform(rng);
  full.write_variable("t", "parameters", values);
  const test::TemporaryDirectory dir;
  save_checkpoint(full, dir.path());
  Embedding half = make_layer(dtype, Adagrad{.learning_rate = 0.1f}, 1);
  restore_checkpoint(half, dir.path(), {.convert_dtype = true});
  const std::vector<float> restored = read_parameters(half);
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(restored[i], round_to_nearest(dtype, values[i])) << i;
  }

  values[5 * kDim + 3] = 70000.0f;  // beyond float16, within bfloat16
  full.write_variable("t", "parameters", values);
  const test::TemporaryDirectory large_dir;
  save_checkpoint(full, large_dir.path());
  Embedding target = make_layer(dtype, Adagrad{.learning_rate = 0.1f}, 1);
  const std::vector<float> before = read_parameters(target);
  if (dtype == DType::kFloat16) {
    EXPECT_THAT([&] { restore_checkpoint(target, large_dir.path(), {.convert_dtype = true}); },
                ::testing::ThrowsMessage<InvalidArgument>(
                    HasSubstr("table 't': row 5 holds 70000, which float16 cannot hold")));
    EXPECT_EQ(read_parameters(target), before);  // nothing changed
    EXPECT_EQ(target.step(), 0);
  } else {
    restore_checkpoint(target, large_dir.path(), {.convert_dtype = true});
    EXPECT_EQ(read_parameters(target)[5 * kDim + 3], 70144.0f);  // bfloat16's nearest
  }
}

// A dynamic 16-bit table (docs/semantics.md, "16-bit tables"): keys drawn from both signs.
constexpr int64_t kDynamicCapacity = 64;
constexpr int64_t kKeys = 40;

Embedding make_dynamic_layer(DType dtype, int threads,
                             std::optional<PlacementOptions> placement = {}) {
  return Embedding({{.name = "d",
                     .dim = kDim,
                     .initializer = TruncatedNormal{.mean = 0.0f, .stddev = 0.5f},
                     .combiner = Combiner::kSum,
                     .dynamic_vocabulary = DynamicVocabulary{.capacity = kDynamicCapacity},
                     .dtype = dtype}},
                   {{.name = "f", .table = "d"}},
                   {.optimizer = Sgd{.learning_rate = 0.05f},
                    .num_threads = threads,
                    .seed = kSeed,
                    .placement = std::move(placement)});
}

// The steps of random_steps with each id replaced by one of kKeys random keys.
Steps random_key_steps(int count, uint32_t seed) {
  Steps steps = random_steps(count, seed);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> keys(static_cast<size_t>(kKeys));
  for (int64_t& key : keys) key = static_cast<int64_t>(rng());
  for (auto& ids : steps.ids) {
    for (int64_t& id : ids) id = keys[static_cast<size_t>(id % kKeys)];
  }
  return steps;
}

// Its keys' rows, by key.
std::map<int64_t, std::vector<float>> rows_by_key(const Embedding& layer) {
  const DynamicTableContents contents = layer.read_dynamic_table("d");
  std::map<int64_t, std::vector<float>> rows;
  for (size_t i = 0; i < contents.keys.size(); ++i) {
    rows[contents.keys[i]].assign(contents.parameters.begin() + static_cast<int64_t>(i) * kDim,
                                  contents.parameters.begin() + static_cast<int64_t>(i + 1) * kDim);
  }
  return rows;
}

// Each key's row starts as its float32 initial row rounded to nearest; each SGD step is the
// float64 update of its summed gradient, then stochastic rounding with the bits of (table seed,
// step, key, column): the key, not the slot, so that every placement rounds alike (a few values
// may differ by one grid step where float32 and float64 straddle the threshold, as for static
// tables).
TEST_P(EmbeddingHalf, DynamicTablesStartRoundedToNearestAndRoundUpdatesByKey) {
  const DType dtype = GetParam();
  constexpr double kLearningRate = 0.05;
  Embedding layer = make_dynamic_layer(dtype, 2);
  const uint64_t table_seed = internal::table_seed(kSeed, "d");
  const Steps steps = random_key_steps(5, 12);
  std::map<int64_t, std::vector<double>> expected;
  int64_t off_by_one_step = 0;
  for (size_t s = 0; s < steps.ids.size(); ++s) {
    std::map<int64_t, std::vector<double>> gradients;
    for (int64_t j = 0; j < kBatch * kBag; ++j) {
      const int64_t key = steps.ids[s][static_cast<size_t>(j)];
      if (!expected.count(key)) {  // admitted by this lookup: its initial row, to nearest
        std::vector<float> initial(static_cast<size_t>(kDim));
        internal::initialize_rows(TruncatedNormal{.mean = 0.0f, .stddev = 0.5f}, table_seed, key, 1,
                                  kDim, initial);
        for (const float value : initial) {
          expected[key].push_back(round_to_nearest(dtype, value));
        }
      }
      std::vector<double>& gradient = gradients[key];
      gradient.resize(static_cast<size_t>(kDim), 0.0);
      for (int64_t d = 0; d < kDim; ++d) {
        gradient[static_cast<size_t>(d)] +=
            double{steps.weights[s][static_cast<size_t>(j)]} *
            steps.gradients[s][static_cast<size_t>(j / kBag * kDim + d)];
      }
    }
    for (const auto& [key, gradient] : gradients) {
      const uint64_t stream = internal::rounding_stream(table_seed, static_cast<int64_t>(s), key);
      for (int64_t d = 0; d < kDim; ++d) {
        double& w = expected[key][static_cast<size_t>(d)];
        w = round_stochastically(
            dtype, static_cast<float>(w - kLearningRate * gradient[static_cast<size_t>(d)]),
            reference::rounding_bits(stream, d));
      }
    }
    train_step(layer, steps, s);
    std::map<int64_t, std::vector<float>> actual = rows_by_key(layer);
    ASSERT_EQ(actual.size(), expected.size());
    for (auto& [key, row] : expected) {
      for (int64_t d = 0; d < kDim; ++d) {
        const double value = actual.at(key)[static_cast<size_t>(d)];
        double& want = row[static_cast<size_t>(d)];
        if (value == want) continue;
        const Neighbours n = neighbours(dtype, want);
        ASSERT_LE(std::fabs(value - want), std::fabs(n.hi - n.lo) * 1.0000001)
            << "step " << s << ", key " << key << ", column " << d;
        ++off_by_one_step;
        want = value;  // follow the engine from here
      }
    }
  }
  EXPECT_LE(off_by_one_step, 3) << "of " << steps.ids.size() * kKeys * kDim;
}

// The same steps give the same 16-bit rows for 1 and 2 threads, row-wise and column-wise parts
// (whose slots differ), and checkpoints of them hold the 16-bit rows as they are: restored into
// another placement, or converted exactly into a float32 dynamic table.
TEST_P(EmbeddingHalf, DynamicTablesAreTheSameInEveryPlacementAndCheckpointAsTheyAre) {
  const DType dtype = GetParam();
  const Steps steps = random_key_steps(4, 13);
  const auto run = [&](int threads, std::optional<PlacementOptions> placement) {
    Embedding layer = make_dynamic_layer(dtype, threads, std::move(placement));
    for (size_t s = 0; s < steps.ids.size(); ++s) train_step(layer, steps, s);
    return layer;
  };
  const Embedding one = run(1, {});
  const std::map<int64_t, std::vector<float>> expected = rows_by_key(one);
  EXPECT_EQ(rows_by_key(run(2, {})), expected);
  for (const ShardingStrategy strategy :
       {ShardingStrategy::kRowWise, ShardingStrategy::kColumnWise}) {
    Embedding sharded = run(2, PlacementOptions{.num_shards = 2, .strategy = strategy});
    EXPECT_EQ(rows_by_key(sharded), expected) << sharding_strategy_name(strategy);
    const test::TemporaryDirectory dir;
    const std::filesystem::path checkpoint = save_checkpoint(sharded, dir.path());
    const std::string extension = dtype == DType::kBFloat16 ? ".bf16" : ".f16";
    EXPECT_EQ(std::filesystem::file_size(checkpoint / ("t0.parameters" + extension)),
              expected.size() * kDim * 2);
    Embedding restored = make_dynamic_layer(dtype, 1);
    restore_checkpoint(restored, checkpoint);
    EXPECT_EQ(rows_by_key(restored), expected);
    Embedding full = make_dynamic_layer(DType::kFloat32, 1);
    restore_checkpoint(full, checkpoint, {.convert_dtype = true});
    EXPECT_EQ(rows_by_key(full), expected);  // widened exactly
  }
}

INSTANTIATE_TEST_SUITE_P(Types, EmbeddingHalf, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const auto& type) { return std::string(dtype_name(type.param)); });

TEST(EmbeddingHalfConfig, ADynamicFloat16TableNeedsAnInitializerWithinItsRange) {
  const auto build = [](Initializer initializer) {
    Embedding({{.name = "d",
                .dim = 4,
                .initializer = std::move(initializer),
                .dynamic_vocabulary = DynamicVocabulary{.capacity = 10},
                .dtype = DType::kFloat16}},
              {{.name = "f", .table = "d"}});
  };
  EXPECT_THAT([&] { build(Constant{.value = 7e4f}); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("table 'd': a dynamic float16 table needs an initializer whose values "
                            "stay below 65520")));
  EXPECT_THAT([&] { build(TruncatedNormal{.mean = 6e4f, .stddev = 3e3f}); },
              ::testing::Throws<InvalidArgument>());
  EXPECT_THAT([&] { build(RowId{}); }, ::testing::Throws<InvalidArgument>());  // any key
  build(TruncatedNormal{.mean = 1.0f, .stddev = 2.0f});
  build(Constant{.value = -65504.0f});
}

TEST(EmbeddingHalfConfig, AFloat16TableWhoseInitialValuesOverflowIsRefused) {
  EXPECT_THAT(
      [] {
        Embedding({{.name = "t",
                    .vocabulary_size = 4,
                    .dim = 2,
                    .initializer = Constant{.value = 1e5f},
                    .dtype = DType::kFloat16}},
                  {{.name = "f", .table = "t"}});
      },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("beyond float16's range")));
}

}  // namespace
}  // namespace recemb

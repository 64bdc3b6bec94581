#include "serve/model_registry.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <sstream>
#include <thread>

#include "recemb/error.h"
#include "recemb/publish.h"

#include "serve/serving_fixtures.h"
#include "testing/criteo_lines.h"
#include "testing/error_of.h"
#include "testing/temporary_directory.h"

namespace recemb::serve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(ModelRegistry, ValidNames) {
  for (const char* name : {"ctr", "a.b-c_1", "X", "..a"}) EXPECT_TRUE(is_valid_model_name(name));
  for (const char* name : {"", ".", "..", "a/b", "a b", "a:b", "é", "a\\b"}) {
    EXPECT_FALSE(is_valid_model_name(name)) << name;
  }
}

// The newest version that opens is served; a damaged newer one is refused and logged; versions
// found are listed; invalid names and non-version directories are skipped.
TEST(ModelRegistry, ServesTheNewestVersionThatOpens) {
  recemb::test::TemporaryDirectory dir;
  const Embedding first = test::lookup_embedding(1);
  const Embedding second = test::lookup_embedding(2);  // versions 12 and 20
  test::export_to(first, dir / "ctr" / "3");
  test::export_to(second, dir / "ctr" / "12");
  fs::create_directories(dir / "ctr" / "20");
  fs::copy_file(dir / "ctr" / "12" / "model.recemb", dir / "ctr" / "20" / "model.recemb");
  {  // damage one byte of version 20's tables
    std::fstream file(dir / "ctr" / "20" / "model.recemb",
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-8, std::ios::end);
    file.put('\x55');
  }
  fs::create_directories(dir / "ctr" / "latest");
  test::export_to(first, dir / "bad name");
  test::export_to(first, dir / "other" / "1");

  std::ostringstream log;
  const ModelRegistry registry(dir.path(), log);
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"ctr", "other"}));
  const auto ctr = registry.find("ctr");
  ASSERT_NE(ctr, nullptr);
  EXPECT_EQ(ctr->version, 12);
  EXPECT_EQ(registry.versions("ctr"), (std::vector<int64_t>{3, 12, 20}));
  EXPECT_EQ(registry.versions("nothing"), std::vector<int64_t>{});
  EXPECT_EQ(ctr->predictor, nullptr);
  EXPECT_THAT(ctr->no_predict_reason, HasSubstr("dense"));
  EXPECT_EQ(ctr->file, fs::canonical(dir / "ctr" / "12" / "model.recemb"));
  EXPECT_EQ(registry.find("nothing"), nullptr);
  EXPECT_THAT(log.str(), HasSubstr("refusing model 'ctr' version 20"));
  EXPECT_THAT(log.str(), HasSubstr("serving model 'ctr' version 12"));
  EXPECT_THAT(log.str(), HasSubstr("skipping 'bad name': not a model name"));
  EXPECT_THAT(log.str(), HasSubstr("directory 'latest': not a version"));
}

// No symlink can take a name or a version outside the model directory.
TEST(ModelRegistry, SymlinksMustStayInside) {
  recemb::test::TemporaryDirectory outside, dir;
  test::export_to(test::lookup_embedding(), outside / "m" / "1");
  fs::create_directory_symlink(outside / "m", dir / "escaped");
  fs::create_directories(dir / "v");
  fs::create_directory_symlink(outside / "m" / "1", dir / "v" / "1");
  fs::create_directories(dir / "f" / "1");
  fs::create_symlink(outside / "m" / "1" / "model.recemb", dir / "f" / "1" / "model.recemb");
  test::export_to(test::lookup_embedding(), dir / "inside" / "1");
  fs::create_directory_symlink(dir / "inside", dir / "alias");  // inside: served

  std::ostringstream log;
  const ModelRegistry registry(dir.path(), log);
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"alias", "inside"}));
  EXPECT_THAT(log.str(), HasSubstr("outside the model directory"));
  EXPECT_EQ(registry.find("escaped"), nullptr);
  EXPECT_EQ(registry.find("v"), nullptr);
  EXPECT_EQ(registry.find("f"), nullptr);
}

// Damages one byte near the end of `file` (a table's bytes: the checksum fails).
void damage(const fs::path& file) {
  std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
  stream.seekg(-8, std::ios::end);
  const char byte = static_cast<char>(stream.get());
  stream.seekp(-8, std::ios::end);
  stream.put(static_cast<char>(byte ^ 0x55));
}

// How often `text` occurs in `log`.
size_t count_of(const std::string& log, const std::string& text) {
  size_t count = 0;
  for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++count;
  return count;
}

// The activations `model` gives a fixed random batch: what tells the versions apart.
std::vector<std::vector<float>> activations_of(const ServingModel& model) {
  std::mt19937_64 random(3);
  return test::reference_activations(model, test::random_batch(random, 16));
}

// A newer version is swapped in by refresh(); the model a request still holds keeps answering
// as before; a damaged version is refused once and retried when its file changes; removing the
// served version rolls back to the newest older one; a new name is added; a removed name keeps
// being served.
TEST(ModelRegistry, RefreshSwapsVersionsIn) {
  recemb::test::TemporaryDirectory dir;
  const Embedding first = test::lookup_embedding(1);
  const Embedding second = test::lookup_embedding(2);
  const Embedding third = test::lookup_embedding(3);
  test::export_to(first, dir / "ctr" / "1");
  std::ostringstream log;
  ModelRegistry registry(dir.path(), log);
  const std::shared_ptr<const ServedModel> held = registry.find("ctr");
  const auto first_activations = activations_of(held->model);
  EXPECT_EQ(registry.refresh(), 0);  // nothing new

  test::export_to(second, dir / "ctr" / "2");
  EXPECT_EQ(registry.refresh(), 1);
  const auto swapped = registry.find("ctr");
  EXPECT_EQ(swapped->version, 2);
  EXPECT_EQ(registry.versions("ctr"), (std::vector<int64_t>{1, 2}));
  EXPECT_NE(activations_of(swapped->model), first_activations);
  EXPECT_EQ(activations_of(held->model), first_activations);  // the old model, still whole
  EXPECT_THAT(log.str(), HasSubstr("model 'ctr': replacing version 1"));

  test::export_to(third, dir / "ctr" / "3");
  damage(dir / "ctr" / "3" / "model.recemb");
  EXPECT_EQ(registry.refresh(), 0);
  EXPECT_EQ(registry.refresh(), 0);
  EXPECT_EQ(registry.find("ctr")->version, 2);
  EXPECT_EQ(count_of(log.str(), "refusing model 'ctr' version 3"), 1u) << log.str();
  EXPECT_EQ(registry.versions("ctr"), (std::vector<int64_t>{1, 2, 3}));
  test::export_to(third, dir / "ctr" / "3");  // repaired: another size or time
  fs::last_write_time(
      dir / "ctr" / "3" / "model.recemb",
      fs::last_write_time(dir / "ctr" / "3" / "model.recemb") + std::chrono::seconds(1));
  EXPECT_EQ(registry.refresh(), 1);
  EXPECT_EQ(registry.find("ctr")->version, 3);
  EXPECT_EQ(activations_of(registry.find("ctr")->model),
            activations_of(ServingModel::open(dir / "ctr" / "3" / "model.recemb")));

  fs::remove_all(dir / "ctr" / "3");  // rollback
  fs::remove_all(dir / "ctr" / "2");
  EXPECT_EQ(registry.refresh(), 1);
  EXPECT_EQ(registry.find("ctr")->version, 1);
  EXPECT_EQ(activations_of(registry.find("ctr")->model), first_activations);

  test::export_to(second, dir / "new" / "4");
  EXPECT_EQ(registry.refresh(), 1);
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"ctr", "new"}));
  fs::remove_all(dir / "new");
  EXPECT_EQ(registry.refresh(), 0);
  EXPECT_EQ(registry.refresh(), 0);
  EXPECT_EQ(registry.find("new")->version, 4);
  EXPECT_EQ(count_of(log.str(), "model 'new' is no longer in the model directory"), 1u);
}

// Lookups on models found while another thread swaps versions in: every lookup answers with
// the activations of one of the versions (run under TSan in CI).
TEST(ModelRegistry, LookupsGoOnDuringSwaps) {
  recemb::test::TemporaryDirectory dir;
  std::vector<std::vector<std::vector<float>>> expected;
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    const Embedding embedding = test::lookup_embedding(seed);
    test::export_to(embedding, dir / "stage" / std::to_string(seed));
    expected.push_back(
        activations_of(ServingModel::open(dir / "stage" / std::to_string(seed) / "model.recemb")));
  }
  fs::create_directories(dir / "root" / "m");
  fs::copy(dir / "stage" / "1", dir / "root" / "m" / "1");
  std::ostringstream log;
  ModelRegistry registry(dir / "root", log);
  std::atomic<bool> done{false};
  std::atomic<int> lookups{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (!done) {
        const std::shared_ptr<const ServedModel> model = registry.find("m");
        const auto activations = activations_of(model->model);
        const auto index = static_cast<size_t>((model->version - 1) % 2);
        EXPECT_EQ(activations, expected[index]);
        ++lookups;
      }
    });
  }
  for (int version = 2; version <= 7; ++version) {  // alternating contents
    fs::copy(dir / "stage" / std::to_string(2 - version % 2),
             dir / "root" / "m" / std::to_string(version));
    const int before = lookups;
    EXPECT_EQ(registry.refresh(), 1);
    while (lookups < before + 4) std::this_thread::yield();  // lookups before and after the swap
  }
  done = true;
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(registry.find("m")->version, 7);
  EXPECT_GT(lookups.load(), 0);
}

// One training step of `embedding` (lookup_embedding's model) on a random batch with random
// gradients: rows of t, u and users change, and users admits (and, full, evicts) keys.
void train_step(Embedding& embedding, std::mt19937_64& random) {
  const test::RandomBatch batch = test::random_batch(random, 16);
  const std::vector<FeatureInput> inputs = batch.inputs();
  std::vector<std::vector<float>> activations(inputs.size()), gradients(inputs.size());
  std::vector<std::span<float>> outputs;
  std::vector<std::span<const float>> gradient_spans;
  std::normal_distribution<float> normal;
  for (size_t f = 0; f < inputs.size(); ++f) {
    int64_t size = 1;
    for (int64_t extent : embedding.activation_shape(f, inputs[f])) size *= extent;
    activations[f].resize(static_cast<size_t>(size));
    gradients[f].resize(static_cast<size_t>(size));
    for (float& g : gradients[f]) g = normal(random);
    outputs.emplace_back(activations[f]);
    gradient_spans.emplace_back(gradients[f]);
  }
  LookupBatch lookup_batch;
  embedding.lookup(inputs, outputs, lookup_batch);
  embedding.apply_gradients(lookup_batch, gradient_spans);
}

// Deltas published beside the served version are applied by refresh() to a replica no request
// holds and swapped in: the model served then answers as a fresh export of the same step; a
// request holding an earlier state keeps it; a replica still held delays the next application;
// a damaged delta is refused once and the model stays at the deltas before it.
TEST(ModelRegistry, RefreshAppliesDeltas) {
  recemb::test::TemporaryDirectory dir;
  std::mt19937_64 random(17);
  Embedding embedding = test::lookup_embedding(4, Sgd{.learning_rate = 0.5f});
  const auto fresh_activations = [&] {
    export_serving_model(embedding, dir / "fresh.recemb");
    return activations_of(ServingModel::open(dir / "fresh.recemb"));
  };
  std::filesystem::create_directories(dir / "root");
  EXPECT_EQ(publish(embedding, dir / "root" / "m").sequence, 0);
  std::ostringstream log;
  ModelRegistry registry(dir / "root", log);
  std::shared_ptr<const ServedModel> base = registry.find("m");
  const auto base_activations = activations_of(base->model);
  EXPECT_EQ(registry.refresh(), 0);

  train_step(embedding, random);
  EXPECT_EQ(publish(embedding, dir / "root" / "m").sequence, 1);
  EXPECT_EQ(registry.refresh(), 1);
  std::shared_ptr<const ServedModel> held = registry.find("m");
  EXPECT_EQ(held->version, 1);
  EXPECT_EQ(held->model.delta_sequence(), 1);
  EXPECT_EQ(activations_of(held->model), fresh_activations());
  EXPECT_NE(activations_of(held->model), base_activations);
  EXPECT_EQ(activations_of(base->model), base_activations);  // the request's model, unchanged
  EXPECT_THAT(log.str(), HasSubstr("model 'm' version 1: delta 1 applied"));

  for (int64_t sequence = 2; sequence <= 3; ++sequence) {
    train_step(embedding, random);
    EXPECT_EQ(publish(embedding, dir / "root" / "m").sequence, sequence);
  }
  // `base` still holds the replica the next deltas go to: they wait for it.
  EXPECT_EQ(registry.refresh(), 0);
  EXPECT_EQ(registry.find("m")->model.delta_sequence(), 1);
  base.reset();
  EXPECT_EQ(registry.refresh(), 1);
  EXPECT_EQ(registry.find("m")->model.delta_sequence(), 3);
  EXPECT_EQ(activations_of(registry.find("m")->model), fresh_activations());
  EXPECT_EQ(held->model.delta_sequence(), 1);  // still whole: the next replica is the other one
  held.reset();

  train_step(embedding, random);
  const PublishResult fourth = publish(embedding, dir / "root" / "m");
  damage(fourth.file);
  EXPECT_EQ(registry.refresh(), 0);
  EXPECT_EQ(registry.refresh(), 0);
  EXPECT_EQ(registry.find("m")->model.delta_sequence(), 3);
  EXPECT_EQ(count_of(log.str(), "refusing model 'm' version 1 delta 4"), 1u) << log.str();
  // Requests go on answering as at delta 3 (another replica than the one refused).
  EXPECT_EQ(activations_of(registry.find("m")->model).size(), 4u);
}

// Requests predicting at once, each on its own copy from the pool, get what one Predictor
// predicting the same batch alone gives, bitwise (a batch of other lines may round differently:
// the dense layers' blocking depends on the batch size).
TEST(PredictorPool, ConcurrentPredictionsEqualOnePredictors) {
  recemb::test::TemporaryDirectory dir;
  test::train_and_export(dir / "work", dir / "model");
  const ServingModel model = ServingModel::open(dir / "model" / "model.recemb");
  std::mt19937_64 random(8);
  std::vector<std::string> lines;
  for (int i = 0; i < 24; ++i) lines.push_back(recemb::test::random_criteo_line(random));
  lines[5] = "1\tnot a line";
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  train::Predictor alone = train::Predictor::of(model);
  std::vector<train::Prediction> expected(lines.size());
  alone.predict(views, expected);
  ASSERT_FALSE(expected[5].error.empty());

  PredictorPool pool(train::Predictor::of(model));
  std::vector<std::thread> requests;
  for (int t = 0; t < 3; ++t) {
    requests.emplace_back([&] {
      for (int round = 0; round < 10; ++round) {
        std::vector<train::Prediction> results(lines.size());
        pool.predict(views, results);
        for (size_t i = 0; i < results.size(); ++i) {
          EXPECT_EQ(results[i].probability, expected[i].probability) << i;
          EXPECT_EQ(results[i].error, expected[i].error) << i;
        }
      }
    });
  }
  for (std::thread& request : requests) request.join();
}

TEST(ModelRegistry, NoModelIsAnErrorSayingTheLayout) {
  recemb::test::TemporaryDirectory dir;
  std::ostringstream log;
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>([&] { ModelRegistry(dir.path(), log); }),
              HasSubstr("expected MODEL_DIR/NAME/VERSION/model.recemb"));
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>([&] { ModelRegistry(dir / "missing", log); }),
              HasSubstr("is not a directory"));
  test::export_to(test::lookup_embedding(), dir / "m");  // no version directory
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>([&] { ModelRegistry(dir.path(), log); }),
              HasSubstr("no model to serve"));
}

}  // namespace
}  // namespace recemb::serve

#include "serve/model_registry.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <sstream>
#include <stop_token>
#include <sys/resource.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "recemb/error.h"
#include "recemb/publish.h"

#include "serve/serving_fixtures.h"
#include "testing/criteo_lines.h"
#include "testing/error_of.h"
#include "testing/fault_file_system.h"
#include "testing/temporary_directory.h"

namespace recemb::serve {
namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

// The lowest file descriptor free: with it as the limit, every open fails with EMFILE.
int lowest_free_descriptor() {
  const int free = dup(0);
  close(free);
  return free;
}

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
  EXPECT_THAT(log.str(), HasSubstr("entry 'latest': not a version"));
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

// The activations of a fresh export of `embedding` (written to `file`): the reference a served
// model after deltas must equal, computed without the server's replicas or deltas.
std::vector<std::vector<float>> exported_activations(const Embedding& embedding,
                                                     const fs::path& file) {
  export_serving_model(embedding, file);
  return activations_of(ServingModel::open(file));
}

// A new base published after the server applied deltas of the previous version is served from
// its own file, and so are its deltas (not the previous version's retired replica).
TEST(ModelRegistry, ANewBaseAfterDeltasIsServedWithItsOwnDeltas) {
  recemb::test::TemporaryDirectory dir;
  std::mt19937_64 random(31);
  fs::create_directories(dir / "root");
  Embedding old_layer = test::lookup_embedding(6, Sgd{.learning_rate = 0.5f});
  EXPECT_EQ(publish(old_layer, dir / "root" / "m").version, 1);
  std::ostringstream log;
  ModelRegistry registry(dir / "root", log);
  for (int64_t sequence = 1; sequence <= 3; ++sequence) {
    train_step(old_layer, random);
    publish(old_layer, dir / "root" / "m");
    EXPECT_EQ(registry.refresh(), 1);
    EXPECT_EQ(registry.find("m")->model.delta_sequence(), sequence);
  }
  Embedding new_layer = test::lookup_embedding(7, Sgd{.learning_rate = 0.5f});
  train_step(new_layer, random);
  EXPECT_EQ(publish(new_layer, dir / "root" / "m").version, 2);
  EXPECT_EQ(registry.refresh(), 1);
  EXPECT_EQ(registry.find("m")->version, 2);
  EXPECT_EQ(registry.find("m")->model.delta_sequence(), 0);
  EXPECT_EQ(activations_of(registry.find("m")->model),
            exported_activations(new_layer, dir / "fresh.recemb"));
  for (int64_t sequence = 1; sequence <= 3; ++sequence) {
    train_step(new_layer, random);
    EXPECT_EQ(publish(new_layer, dir / "root" / "m").sequence, sequence);
    EXPECT_EQ(registry.refresh(), 1);
    const std::shared_ptr<const ServedModel> served = registry.find("m");
    EXPECT_EQ(served->version, 2);
    EXPECT_EQ(served->model.delta_sequence(), sequence);
    EXPECT_EQ(activations_of(served->model), exported_activations(new_layer, dir / "fresh.recemb"))
        << "version 2 delta " << sequence;
  }
  EXPECT_THAT(log.str(), Not(HasSubstr("refusing"))) << log.str();
}

// Every interleaving of what a model directory sees: deltas of the newest version, deltas of an
// older one, new bases (a resumed trainer), a rollback (the newest version's directory removed),
// a server restarted mid-stream, requests holding a served model across a swap, and several
// publications between two scans. After each scan the model served is the newest version present
// with all its deltas, equal to a fresh export of its layer at its last publication (the
// reference, kept per version and sequence from what was published).
TEST(ModelRegistry, EveryInterleavingOfVersionsAndDeltasServesWhatWasPublished) {
  recemb::test::TemporaryDirectory dir;
  const fs::path model_dir = dir / "root" / "m";
  fs::create_directories(dir / "root");
  std::mt19937_64 random(41);
  // Older versions stay, to publish deltas into and to roll back to: no retention.
  const PublishOptions kKeepEveryVersion{
      .base_every_deltas = 0, .base_every_bytes = 0, .keep_versions = 0};
  struct Layer {
    Embedding embedding;
    int64_t version = 0;
  };
  std::vector<std::unique_ptr<Layer>> layers;  // one per version present, increasing
  // Per version present: the activations of each state published (base, delta 1, ...).
  std::map<int64_t, std::vector<std::vector<std::vector<float>>>> published;
  uint64_t seed = 100;
  const auto new_base = [&] {
    auto layer = std::make_unique<Layer>(
        Layer{.embedding = test::lookup_embedding(++seed, Sgd{.learning_rate = 0.5f})});
    train_step(layer->embedding, random);
    const PublishResult result = publish(layer->embedding, model_dir, kKeepEveryVersion);
    EXPECT_EQ(result.sequence, 0);
    layer->version = result.version;
    published[result.version] = {exported_activations(layer->embedding, dir / "fresh.recemb")};
    layers.push_back(std::move(layer));
  };
  const auto delta = [&](Layer& layer) {
    train_step(layer.embedding, random);
    const PublishResult result = publish(layer.embedding, model_dir, kKeepEveryVersion);
    EXPECT_EQ(result.version, layer.version);
    EXPECT_EQ(result.sequence, std::ssize(published[layer.version]));
    published[layer.version].push_back(exported_activations(layer.embedding, dir / "fresh.recemb"));
  };
  std::ostringstream log;
  std::string steps;  // what happened, for a failure's message
  const auto check = [&](const ModelRegistry& registry) {
    const auto& [version, states] = *published.rbegin();
    const std::shared_ptr<const ServedModel> served = registry.find("m");
    ASSERT_NE(served, nullptr);
    EXPECT_EQ(served->version, version) << steps;
    EXPECT_EQ(served->model.delta_sequence(), std::ssize(states) - 1) << steps;
    EXPECT_EQ(activations_of(served->model), states.back()) << steps;
  };
  new_base();
  auto registry = std::make_unique<ModelRegistry>(dir / "root", log);
  std::map<std::string, int> counts;
  for (int step = 0; step < 90; ++step) {
    const uint64_t choice = random() % 100;
    std::string operation;
    std::shared_ptr<const ServedModel> held;
    std::vector<std::vector<float>> held_activations;
    if (choice < 40) {
      operation = "delta";
      delta(*layers.back());
    } else if (choice < 50 && layers.size() > 1) {
      operation = "delta of an older version";
      delta(*layers[random() % (layers.size() - 1)]);
    } else if (choice < 64) {
      operation = "new base";
      new_base();
    } else if (choice < 74 && layers.size() > 1) {
      operation = "rollback";
      fs::remove_all(model_dir / std::to_string(layers.back()->version));
      published.erase(layers.back()->version);
      layers.pop_back();
    } else if (choice < 84) {
      operation = "restart";
      registry = std::make_unique<ModelRegistry>(dir / "root", log);
      check(*registry);  // the newest version with its deltas, from the start
    } else {
      operation = "a request held across a scan";
      held = registry->find("m");
      held_activations = activations_of(held->model);
      delta(*layers.back());
    }
    ++counts[operation];
    steps += " " + operation + ";";
    if (random() % 4 == 0) continue;  // more publications before the next scan
    registry->refresh();
    check(*registry);
    if (held) {
      EXPECT_EQ(activations_of(held->model), held_activations) << steps;
    }
  }
  for (const char* operation : {"delta", "delta of an older version", "new base", "rollback",
                                "restart", "a request held across a scan"}) {
    EXPECT_GE(counts[operation], 3) << operation;
  }
  EXPECT_THAT(log.str(), Not(HasSubstr("refusing"))) << log.str();
}

// A delta already applied and removed since (the spare replica, a delta behind, would re-read
// it) does not hold the model back: the spare is copied from the served replica, and the later
// deltas are applied.
TEST(ModelRegistry, AnAppliedDeltaRemovedDoesNotBlockTheNextOnes) {
  recemb::test::TemporaryDirectory dir;
  std::mt19937_64 random(43);
  fs::create_directories(dir / "root");
  Embedding layer = test::lookup_embedding(8, Sgd{.learning_rate = 0.5f});
  publish(layer, dir / "root" / "m");
  std::ostringstream log;
  ModelRegistry registry(dir / "root", log);
  std::vector<fs::path> deltas;
  for (int64_t sequence = 1; sequence <= 3; ++sequence) {
    train_step(layer, random);
    deltas.push_back(publish(layer, dir / "root" / "m").file);
    EXPECT_EQ(registry.refresh(), 1);
  }
  fs::remove(deltas[2]);  // delta 3, served; the spare holds delta 2
  for (int64_t sequence = 4; sequence <= 6; ++sequence) {
    train_step(layer, random);
    publish(layer, dir / "root" / "m");
    EXPECT_EQ(registry.refresh(), 1);
    EXPECT_EQ(registry.find("m")->model.delta_sequence(), sequence);
    EXPECT_EQ(activations_of(registry.find("m")->model),
              exported_activations(layer, dir / "fresh.recemb"));
  }
  EXPECT_EQ(count_of(log.str(), "delta 3 cannot be applied again to the spare replica"), 1u)
      << log.str();
  EXPECT_THAT(log.str(), Not(HasSubstr("refusing"))) << log.str();
}

// A failing system call reading a delta or a version (EMFILE) is not a refusal: it is tried
// again at later scans, after 1, 2, 4, 8, then every 16 scans, and at once when the file changes,
// and logged once; a file refused for its content is not read again until it changes.
TEST(ModelRegistry, TransientErrorsAreRetriedAndContentErrorsRemembered) {
  recemb::test::TemporaryDirectory dir;
  std::mt19937_64 random(47);
  fs::create_directories(dir / "root");
  Embedding layer = test::lookup_embedding(9, Sgd{.learning_rate = 0.5f});
  publish(layer, dir / "root" / "m");
  std::ostringstream log;
  ModelRegistry registry(dir / "root", log);
  recemb::test::FaultFileSystem faults;
  train_step(layer, random);
  const fs::path first = publish(layer, dir / "root" / "m").file;
  // The scans (from 1) at which the delta is read, each read failing with EMFILE.
  std::vector<int> tried;
  for (int scan = 1; scan <= 48; ++scan) {
    faults.fail_read(faults.reads() + 1, EMFILE);
    const int before = faults.reads();
    EXPECT_EQ(registry.refresh(), 0);
    if (faults.reads() > before) tried.push_back(scan);
  }
  EXPECT_EQ(tried, (std::vector<int>{1, 2, 4, 8, 16, 32, 48}));
  EXPECT_EQ(count_of(log.str(), "cannot read model 'm' version 1 delta 1"), 1u) << log.str();
  EXPECT_THAT(log.str(), HasSubstr("Too many open files"));
  EXPECT_THAT(log.str(), Not(HasSubstr("refusing")));
  // The file changed (touched): tried at once, and applied.
  fs::last_write_time(first, fs::last_write_time(first) + std::chrono::seconds(1));
  EXPECT_EQ(registry.refresh(), 1);
  EXPECT_EQ(registry.find("m")->model.delta_sequence(), 1);
  EXPECT_THAT(log.str(), HasSubstr("read model 'm' version 1 delta 1 after 7 failed attempts"));

  // Without the file changing: applied once the wait is over.
  train_step(layer, random);
  publish(layer, dir / "root" / "m");
  faults.fail_read(faults.reads() + 1, EIO);
  EXPECT_EQ(registry.refresh(), 0);
  EXPECT_EQ(registry.refresh(), 1);  // the next scan
  EXPECT_EQ(registry.find("m")->model.delta_sequence(), 2);
  EXPECT_EQ(activations_of(registry.find("m")->model),
            exported_activations(layer, dir / "fresh.recemb"));

  // A new version whose read fails is served at a later scan too.
  Embedding next = test::lookup_embedding(10, Sgd{.learning_rate = 0.5f});
  EXPECT_EQ(publish(next, dir / "root" / "m").version, 2);
  faults.fail_read(faults.reads() + 1, ENFILE);
  EXPECT_EQ(registry.refresh(), 0);
  EXPECT_EQ(registry.find("m")->version, 1);
  EXPECT_THAT(log.str(), HasSubstr("cannot read model 'm' version 2"));
  EXPECT_EQ(registry.refresh(), 1);
  EXPECT_EQ(registry.find("m")->version, 2);

  // A damaged delta: refused once, never read again while unchanged.
  train_step(next, random);
  damage(publish(next, dir / "root" / "m").file);
  EXPECT_EQ(registry.refresh(), 0);
  const int reads = faults.reads();
  for (int scan = 0; scan < 4; ++scan) EXPECT_EQ(registry.refresh(), 0);
  EXPECT_EQ(faults.reads(), reads);
  EXPECT_EQ(count_of(log.str(), "refusing model 'm' version 2 delta 1"), 1u) << log.str();
}

// A scan that cannot list the model directory (out of file descriptors) changes nothing: the
// models are kept (never "no longer in the model directory"), the error is logged once, and the
// next scan that can list it goes on.
TEST(ModelRegistry, AScanThatCannotListTheDirectoryKeepsTheModels) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizers' runtime checks memory through a pipe (UBSan's vptr check, their reports):
  // without a free file descriptor it takes valid objects for invalid ones.
  GTEST_SKIP() << "the sanitizers' runtime needs file descriptors this test takes away";
#endif
  recemb::test::TemporaryDirectory dir;
  test::export_to(test::lookup_embedding(1), dir / "ctr" / "1");
  std::ostringstream log;
  ModelRegistry registry(dir.path(), log);
  test::export_to(test::lookup_embedding(2), dir / "ctr" / "2");
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  const rlimit exhausted{.rlim_cur = static_cast<rlim_t>(lowest_free_descriptor()),
                         .rlim_max = limit.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &exhausted), 0);
  const int swapped_then = registry.refresh() + registry.refresh();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(swapped_then, 0);
  EXPECT_EQ(registry.find("ctr")->version, 1);
  EXPECT_EQ(count_of(log.str(), "cannot scan the model directory"), 1u) << log.str();
  EXPECT_THAT(log.str(), Not(HasSubstr("no longer in the model directory")));
  EXPECT_EQ(registry.refresh(), 1);
  EXPECT_EQ(registry.find("ctr")->version, 2);
}

// Entries skipped are logged once when a scan first finds them, during polling too: a FIFO or a
// file as a version, names that are not versions, an invalid model name; again if one goes away
// and comes back.
TEST(ModelRegistry, SkippedEntriesAreLoggedOnceWhenTheyAppear) {
  recemb::test::TemporaryDirectory dir;
  test::export_to(test::lookup_embedding(1), dir / "ctr" / "1");
  std::ostringstream log;
  ModelRegistry registry(dir.path(), log);
  EXPECT_EQ(log.str().find("skipping"), std::string::npos) << log.str();
  ASSERT_EQ(mkfifo((dir / "ctr" / "8").c_str(), 0600), 0);
  std::ofstream(dir / "ctr" / "9") << "not a directory";
  for (const char* name : {"01", "+11", " 12", "1e3", "99999999999999999999"}) {
    fs::create_directories(dir / "ctr" / name);
  }
  test::export_to(test::lookup_embedding(1), dir / "bad name" / "1");
  for (int scan = 0; scan < 3; ++scan) EXPECT_EQ(registry.refresh(), 0);
  const std::string text = log.str();
  EXPECT_EQ(count_of(text, "skipping model 'ctr' entry '8': not a directory"), 1u) << text;
  EXPECT_EQ(count_of(text, "skipping model 'ctr' entry '9': not a directory"), 1u) << text;
  for (const char* name : {"01", "+11", " 12", "1e3", "99999999999999999999"}) {
    EXPECT_EQ(count_of(text, "skipping model 'ctr' entry '" + std::string(name) +
                                 "': not a version (a positive integer)"),
              1u)
        << name << "\n"
        << text;
  }
  EXPECT_EQ(count_of(text, "skipping 'bad name': not a model name"), 1u) << text;
  EXPECT_EQ(registry.versions("ctr"), std::vector<int64_t>{1});
  fs::remove_all(dir / "bad name");
  EXPECT_EQ(registry.refresh(), 0);
  test::export_to(test::lookup_embedding(1), dir / "bad name" / "1");
  EXPECT_EQ(registry.refresh(), 0);
  EXPECT_EQ(count_of(log.str(), "skipping 'bad name': not a model name"), 2u) << log.str();
}

// Once stop is requested, refresh returns without opening what it found, and remembers no
// failure: the next scan serves it.
TEST(ModelRegistry, ARefreshAskedToStopRemembersNothing) {
  recemb::test::TemporaryDirectory dir;
  test::export_to(test::lookup_embedding(1), dir / "ctr" / "1");
  std::ostringstream log;
  ModelRegistry registry(dir.path(), log);
  test::export_to(test::lookup_embedding(2), dir / "ctr" / "2");
  std::stop_source stop;
  stop.request_stop();
  EXPECT_EQ(registry.refresh(stop.get_token()), 0);
  EXPECT_EQ(registry.find("ctr")->version, 1);
  EXPECT_EQ(registry.refresh(), 1);
  EXPECT_EQ(registry.find("ctr")->version, 2);
  EXPECT_THAT(log.str(), Not(AnyOf(HasSubstr("refusing"), HasSubstr("cannot read"))));
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
  dlrm::Predictor alone = dlrm::Predictor::of(model);
  std::vector<dlrm::Prediction> expected(lines.size());
  alone.predict(views, expected);
  ASSERT_FALSE(expected[5].error.empty());

  PredictorPool pool(dlrm::Predictor::of(model));
  std::vector<std::thread> requests;
  for (int t = 0; t < 3; ++t) {
    requests.emplace_back([&] {
      for (int round = 0; round < 10; ++round) {
        std::vector<dlrm::Prediction> results(lines.size());
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

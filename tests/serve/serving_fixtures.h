// Models and random requests shared by the tests of serve/: a model of static, dynamic and
// sequence features, random batches for it, and their JSON and binary bodies written here
// independently of serve/request_codec (from the layouts docs/serving.md specifies).
#ifndef RECEMB_TESTS_SERVE_SERVING_FIXTURES_H_
#define RECEMB_TESTS_SERVE_SERVING_FIXTURES_H_

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/serving.h"
#include "recemb/string_key.h"

#include "dlrm/model_file.h"
#include "testing/criteo_lines.h"
#include "train/config/train_config.h"
#include "train/run/trainer.h"

namespace recemb::serve::test {

// Keys the dynamic table "users" holds: "alice", "carol" and two integers.
inline std::vector<int64_t> user_keys() {
  std::vector<int64_t> keys = {string_key("alice"), string_key("carol"), -7, 123456789012};
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Features a (table t: sum), b (u: mean), s (u: a sequence of 3), user (users: dynamic, mean);
// trainable with `optimizer` when given.
inline Embedding lookup_embedding(uint64_t seed = 5, std::optional<Optimizer> optimizer = {}) {
  Embedding embedding({{.name = "t", .vocabulary_size = 50, .dim = 3, .combiner = Combiner::kSum},
                       {.name = "u", .vocabulary_size = 20, .dim = 2, .combiner = Combiner::kMean},
                       {.name = "users",
                        .dim = 2,
                        .combiner = Combiner::kMean,
                        .dynamic_vocabulary = DynamicVocabulary{.capacity = 100}}},
                      {{.name = "a", .table = "t"},
                       {.name = "b", .table = "u"},
                       {.name = "s", .table = "u", .max_sequence_length = 3},
                       {.name = "user", .table = "users"}},
                      {.optimizer = std::move(optimizer), .seed = seed});
  const std::vector<int64_t> keys = user_keys();
  std::vector<float> rows(keys.size() * 2);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 0.25f * static_cast<float>(i) - 0.6f;
  embedding.write_dynamic_table("users", {.keys = keys, .parameters = rows});
  return embedding;
}

// Exports `embedding` as `dir`/model.recemb (creating `dir`).
inline void export_to(const Embedding& embedding, const std::filesystem::path& dir,
                      ServingDtype dtype = ServingDtype::kFloat32) {
  std::filesystem::create_directories(dir);
  export_serving_model(embedding, dir / "model.recemb", {.dtype = dtype});
}

// Trains a small click model (`recemb train`'s trainer, 12 steps on random Criteo lines in
// `work`) and exports it as `model_dir`/model.recemb, with its dense part.
inline void train_and_export(const std::filesystem::path& work,
                             const std::filesystem::path& model_dir) {
  std::filesystem::create_directories(work);
  std::filesystem::create_directories(model_dir);
  std::mt19937_64 random(23);
  std::ofstream(work / "train.tsv") << recemb::test::random_criteo_text(random, 384);
  const train::TrainConfig config = train::load_train_config(
      "", {"data.path=\"" + (work / "train.tsv").string() + "\"", "data.table_budget_mib=1",
           "model.embedding_dim=4", "model.bottom_mlp=[8, 4]", "model.top_mlp=[8]",
           "train.steps=12", "train.batch_size=32", "train.eval_every=0", "embedding.threads=1",
           "output.dir=\"" + (work / "run").string() + "\""});
  std::ostringstream log;
  train::run_training(config, {.log = &log});
  dlrm::export_checkpoint(work / "run" / "checkpoints", model_dir, ServingDtype::kFloat32, 1);
}

// A random batch for lookup_embedding's model: per feature, ragged ids (bags of 0 to 4 ids; for
// "user" keys held or not), and for "a" weights.
struct RandomBatch {
  int64_t examples = 0;
  std::vector<std::vector<int64_t>> ids;         // per feature
  std::vector<std::vector<int64_t>> row_splits;  // per feature
  std::vector<std::vector<float>> weights;       // per feature: empty or one per id

  std::vector<FeatureInput> inputs() const {
    std::vector<FeatureInput> result;
    for (size_t f = 0; f < ids.size(); ++f) {
      result.push_back(RaggedIds{.values = std::span<const int64_t>(ids[f]),
                                 .row_splits = std::span<const int64_t>(row_splits[f]),
                                 .weights = weights[f]});
    }
    return result;
  }
};

inline RandomBatch random_batch(std::mt19937_64& random, int64_t examples) {
  const std::vector<int64_t> vocabulary = {50, 20, 20, 0};  // 0: dynamic
  const std::vector<int64_t> keys = user_keys();
  RandomBatch batch{.examples = examples, .ids = {}, .row_splits = {}, .weights = {}};
  batch.ids.resize(4);
  batch.row_splits.assign(4, {0});
  batch.weights.resize(4);
  for (size_t f = 0; f < 4; ++f) {
    for (int64_t e = 0; e < examples; ++e) {
      const auto bag = static_cast<int64_t>(random() % 5);
      for (int64_t i = 0; i < bag; ++i) {
        int64_t id = 0;
        if (vocabulary[f] > 0) {
          id = static_cast<int64_t>(random() % static_cast<uint64_t>(vocabulary[f]));
        } else {
          id = random() % 3 == 0 ? static_cast<int64_t>(random()) : keys[random() % keys.size()];
        }
        batch.ids[f].push_back(id);
        if (f == 0) {
          batch.weights[f].push_back(static_cast<float>(random() % 1000) / 250.0f - 2.0f);
        }
      }
      batch.row_splits[f].push_back(static_cast<int64_t>(batch.ids[f].size()));
    }
  }
  return batch;
}

// The batch as {"inputs": {...}}: "a" as {"ids", "weights"} objects, the rest as lists.
inline std::string json_body(const RandomBatch& batch) {
  const std::vector<std::string> names = {"a", "b", "s", "user"};
  std::string body = "{\"inputs\": {";
  for (size_t f = 0; f < names.size(); ++f) {
    body += (f == 0 ? "\"" : ", \"") + names[f] + "\": [";
    for (int64_t e = 0; e < batch.examples; ++e) {
      const auto begin = static_cast<size_t>(batch.row_splits[f][static_cast<size_t>(e)]);
      const auto end = static_cast<size_t>(batch.row_splits[f][static_cast<size_t>(e) + 1]);
      std::string ids = "[", weights = "[";
      for (size_t i = begin; i < end; ++i) {
        ids += (i == begin ? "" : ", ") + std::to_string(batch.ids[f][i]);
        if (!batch.weights[f].empty()) {
          char text[32];
          std::snprintf(text, sizeof text, "%.9g", static_cast<double>(batch.weights[f][i]));
          weights += (i == begin ? "" : ", ") + std::string(text);
        }
      }
      ids += "]";
      weights += "]";
      body += (e == 0 ? "" : ", ");
      body +=
          batch.weights[f].empty() ? ids : "{\"ids\": " + ids + ", \"weights\": " + weights + "}";
    }
    body += "]";
  }
  return body + "}}";
}

template <typename T>
void append_binary(std::string& out, const T* values, size_t count) {
  out.append(reinterpret_cast<const char*>(values), count * sizeof(T));
}

// The feature fingerprint docs/serving.md specifies ("Lookup, binary") of features `names`, whose
// tables are dynamic where `dynamic` says.
inline uint64_t fingerprint_of(const std::vector<std::string>& names,
                               const std::vector<bool>& dynamic) {
  std::string bytes;
  for (size_t f = 0; f < names.size(); ++f) {
    const uint64_t length = names[f].size();
    append_binary(bytes, &length, 1);
    bytes += names[f];
    bytes += static_cast<char>(dynamic[f] ? 1 : 0);
  }
  return static_cast<uint64_t>(string_key(bytes));
}

// The fingerprint of lookup_embedding's features: a, b, s and user (dynamic).
inline uint64_t lookup_fingerprint() {
  return fingerprint_of({"a", "b", "s", "user"}, {false, false, false, true});
}

// The batch in the binary request layout, version 2 (docs/serving.md, "Lookup, binary"),
// encoded for the features of `fingerprint`.
inline std::string binary_body(const RandomBatch& batch,
                               uint64_t fingerprint = lookup_fingerprint()) {
  std::string body;
  const uint32_t header[4] = {0x51424552, 2, static_cast<uint32_t>(batch.ids.size()), 0};
  append_binary(body, header, 4);
  append_binary(body, &fingerprint, 1);
  for (size_t f = 0; f < batch.ids.size(); ++f) {
    const int64_t counts[2] = {batch.examples, static_cast<int64_t>(batch.ids[f].size())};
    const uint32_t flags[2] = {batch.weights[f].empty() ? 0u : 1u, 0};
    append_binary(body, counts, 2);
    append_binary(body, flags, 2);
    append_binary(body, batch.row_splits[f].data(), batch.row_splits[f].size());
    append_binary(body, batch.ids[f].data(), batch.ids[f].size());
    append_binary(body, batch.weights[f].data(), batch.weights[f].size());
  }
  return body;
}

// ServingModel::lookup's activations of the batch: the reference.
inline std::vector<std::vector<float>> reference_activations(const ServingModel& model,
                                                             const RandomBatch& batch) {
  const std::vector<FeatureInput> inputs = batch.inputs();
  std::vector<std::vector<float>> values(inputs.size());
  std::vector<std::span<float>> spans(inputs.size());
  for (size_t f = 0; f < inputs.size(); ++f) {
    int64_t size = 1;
    for (int64_t extent : model.activation_shape(f, inputs[f])) size *= extent;
    values[f].resize(static_cast<size_t>(size));
    spans[f] = values[f];
  }
  model.lookup(inputs, spans);
  return values;
}

// The floats of nested JSON arrays, in order.
template <typename Json>
void flatten(const Json& json, std::vector<float>& out) {
  if (json.is_array()) {
    for (const auto& item : json) flatten(item, out);
  } else {
    out.push_back(json.template get<float>());
  }
}

}  // namespace recemb::serve::test

#endif  // RECEMB_TESTS_SERVE_SERVING_FIXTURES_H_

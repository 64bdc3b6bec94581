#include "serve/request_codec.h"

#include <algorithm>
#include <cstring>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "recemb/embedding.h"
#include "recemb/error.h"

#include "serve/serving_fixtures.h"
#include "testing/error_of.h"
#include "testing/temporary_directory.h"

namespace recemb::serve {
namespace {

using ::testing::HasSubstr;

class RequestCodecTest : public ::testing::Test {
 protected:
  // The message of the InvalidArgument that decoding `body` throws ("" when none).
  std::string json_error(const std::string& body, int64_t max_examples = 100) {
    try {
      decode_json_lookup(body, model_, {.max_examples = max_examples});
    } catch (const InvalidArgument& error) {
      return error.what();
    }
    return "";
  }
  std::string binary_error(const std::string& body, int64_t max_examples = 100) {
    try {
      decode_binary_lookup(body, model_, feature_fingerprint(model_),
                           {.max_examples = max_examples});
    } catch (const InvalidArgument& error) {
      return error.what();
    }
    return "";
  }

  static ServingModel exported(const recemb::test::TemporaryDirectory& dir) {
    test::export_to(test::lookup_embedding(), dir.path());
    return ServingModel::open(dir.path() / "model.recemb");
  }

  recemb::test::TemporaryDirectory dir_;
  ServingModel model_ = exported(dir_);
};

// JSON and binary bodies of random batches decode to lookups whose activations equal
// ServingModel::lookup's of the same ids bitwise, printed (JSON) or stored (binary) exactly.
TEST_F(RequestCodecTest, RandomBatchesEqualTheModelsLookupBitwise) {
  std::mt19937_64 random(11);
  for (int round = 0; round < 20; ++round) {
    const test::RandomBatch batch = test::random_batch(random, 1 + round % 7);
    const std::vector<std::vector<float>> expected = test::reference_activations(model_, batch);

    const nlohmann::json answer = nlohmann::json::parse(
        look_up_json(model_, decode_json_lookup(test::json_body(batch), model_, {}), {}));
    const std::vector<std::string> names = {"a", "b", "s", "user"};
    for (size_t f = 0; f < names.size(); ++f) {
      ASSERT_EQ(answer["outputs"][names[f]].size(), static_cast<size_t>(batch.examples));
      std::vector<float> got;
      test::flatten(answer["outputs"][names[f]], got);
      ASSERT_EQ(got.size(), expected[f].size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(std::memcmp(&got[i], &expected[f][i], sizeof(float)), 0)
            << names[f] << " " << i << ": " << got[i] << " vs " << expected[f][i];
      }
    }

    const std::string encoded = look_up_binary(
        model_,
        decode_binary_lookup(test::binary_body(batch), model_, feature_fingerprint(model_), {}),
        {});
    // Header and fingerprint, then per feature: rank, shape, values.
    uint32_t header[4];
    std::memcpy(header, encoded.data(), sizeof header);
    EXPECT_EQ(header[0], kBinaryAnswerMagic);
    EXPECT_EQ(header[1], 2u);
    EXPECT_EQ(header[2], 4u);
    uint64_t fingerprint = 0;
    std::memcpy(&fingerprint, encoded.data() + 16, sizeof fingerprint);
    EXPECT_EQ(fingerprint, test::lookup_fingerprint());
    size_t offset = sizeof header + sizeof fingerprint;
    for (size_t f = 0; f < 4; ++f) {
      uint32_t rank[2];
      std::memcpy(rank, encoded.data() + offset, sizeof rank);
      offset += sizeof rank;
      std::vector<int64_t> shape(rank[0]);
      std::memcpy(shape.data(), encoded.data() + offset, shape.size() * 8);
      offset += shape.size() * 8;
      EXPECT_EQ(shape.front(), batch.examples);
      EXPECT_EQ(shape, model_.activation_shape(f, batch.inputs()[f]));
      ASSERT_LE(offset + expected[f].size() * 4, encoded.size());
      EXPECT_EQ(std::memcmp(encoded.data() + offset, expected[f].data(), expected[f].size() * 4), 0)
          << names[f];
      offset += expected[f].size() * 4;
    }
    EXPECT_EQ(offset, encoded.size());
  }
}

// String ids of a dynamic table are string_key's; an example without weights among weighted ones
// weighs 1 per id.
TEST_F(RequestCodecTest, StringIdsAndMixedWeights) {
  const LookupRequest request = decode_json_lookup(
      R"({"inputs": {"a": [{"ids": [1, 2], "weights": [0.5, 2]}, [3]], "b": [[], [1]],
          "s": [[1], 2], "user": [["alice", -7], "bob"]}})",
      model_, {.max_examples = 10});
  EXPECT_EQ(request.examples, 2);
  EXPECT_EQ(request.features[0].ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(request.features[0].weights, (std::vector<float>{0.5f, 2.0f, 1.0f}));
  EXPECT_EQ(request.features[0].row_splits, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_TRUE(request.features[1].weights.empty());
  EXPECT_EQ(request.features[3].ids,
            (std::vector<int64_t>{string_key("alice"), -7, string_key("bob")}));
}

TEST_F(RequestCodecTest, BadJsonBodiesNameWhatIsWrong) {
  const std::string good_rest = R"("b": [[1]], "s": [[1]], "user": [[1]])";
  EXPECT_THAT(json_error("{"), HasSubstr("not valid JSON"));
  EXPECT_THAT(json_error("[]"), HasSubstr("must be a JSON object"));
  EXPECT_THAT(json_error(R"({"inputs": {}, "x": 1})"), HasSubstr("unknown field 'x'"));
  EXPECT_THAT(json_error(R"({"instances": []})"), HasSubstr("unknown field 'instances'"));
  EXPECT_THAT(json_error(R"({"inputs": []})"), HasSubstr("\"inputs\" must be an object"));
  EXPECT_THAT(json_error(R"({"inputs": {"a": [[1]], "zz": [[1]], )" + good_rest + "}}"),
              HasSubstr("unknown feature 'zz'"));
  EXPECT_THAT(json_error(R"({"inputs": {"a": [[1]], "b": [[1]], "s": [[1]]}})"),
              HasSubstr("feature 'user' is missing"));
  EXPECT_THAT(json_error(R"({"inputs": {"a": [[1]], "a": [[1]], )" + good_rest + "}}"),
              HasSubstr("feature 'a' appears twice"));
  EXPECT_THAT(json_error(R"({"inputs": {"a": [[1], [2]], )" + good_rest + "}}"),
              HasSubstr("feature 'b' has 1 examples but feature 'a' has 2"));
  EXPECT_THAT(json_error(R"({"inputs": {"a": [], )" + good_rest + "}}"),
              HasSubstr("feature 'a': no examples"));
  EXPECT_THAT(
      json_error(
          R"({"inputs": {"a": [[1], [1], [1]], "b": [[1], [1], [1]], "s": [[1], [1], [1]], "user": [[1], [1], [1]]}})",
          2),
      HasSubstr("3 examples, more than --max-examples 2"));
  EXPECT_THAT(json_error(R"({"inputs": {"a": [[1], ["x"]], )" + good_rest + "}}"),
              HasSubstr("example 1: feature 'a': id \"x\" is not an integer"));
  EXPECT_THAT(json_error(R"({"inputs": {"a": [[1.5]], )" + good_rest + "}}"),
              HasSubstr("is not an integer"));
  EXPECT_THAT(json_error(R"({"inputs": {"a": [[18446744073709551615]], )" + good_rest + "}}"),
              HasSubstr("beyond the 64-bit integer range"));
  EXPECT_THAT(
      json_error(R"({"inputs": {"a": [{"ids": [1, 2], "weights": [1]}], )" + good_rest + "}}"),
      HasSubstr("example 0: feature 'a': 2 ids but 1 weights"));
  EXPECT_THAT(json_error(R"({"inputs": {"a": [{"ids": [1], "ids": [1]}], )" + good_rest + "}}"),
              HasSubstr("feature 'a': field 'ids' appears twice"));
  EXPECT_THAT(json_error(R"({"inputs": {"a": [[[[1]]]], )" + good_rest + "}}"),
              HasSubstr("example 0: feature 'a': id [...] is not an integer"));
  EXPECT_THAT(json_error(R"({"inputs": {"a": 5, )" + good_rest + "}}"),
              HasSubstr("feature 'a' must be a list of examples"));
  // An id out of range is refused by the lookup, naming the feature.
  const LookupRequest out_of_range =
      decode_json_lookup(R"({"inputs": {"a": [[50]], )" + good_rest + "}}", model_, {});
  EXPECT_THAT(
      recemb::test::error_of<InvalidArgument>([&] { look_up_json(model_, out_of_range, {}); }),
      HasSubstr("'a'"));
}

TEST_F(RequestCodecTest, BinaryBodiesAreCheckedBeforeEveryRead) {
  std::mt19937_64 random(3);
  const std::string body = test::binary_body(test::random_batch(random, 3));
  // Every truncation, and any trailing byte, is refused with a message.
  for (size_t length = 0; length < body.size(); ++length) {
    EXPECT_THAT(binary_error(body.substr(0, length)), HasSubstr("binary body")) << length;
  }
  // The message names the field, and the feature it belongs to.
  EXPECT_THAT(binary_error(body.substr(0, 10)),
              HasSubstr("binary body: the number of features (1 x 4 bytes at byte 8) runs past "
                        "the end of the body (10 bytes)"));
  EXPECT_THAT(binary_error(body.substr(0, 20)),
              HasSubstr("binary body: the feature fingerprint (1 x 8 bytes at byte 16) runs past "
                        "the end of the body (20 bytes)"));
  EXPECT_THAT(binary_error(body.substr(0, 28)),
              HasSubstr("binary body: feature 0 ('a') examples (1 x 8 bytes at byte 24) runs past "
                        "the end of the body (28 bytes)"));
  EXPECT_THAT(binary_error(body.substr(0, 58)),
              HasSubstr("binary body: feature 0 ('a') offsets (4 x 8 bytes at byte 48)"));
  EXPECT_THAT(binary_error(body + "x"), HasSubstr("1 bytes after the last feature"));
  EXPECT_EQ(binary_error(body), "");
  EXPECT_THAT(binary_error(body, 2), HasSubstr("more than --max-examples 2"));

  const auto with = [&](size_t offset, const auto value) {
    std::string changed = body;
    std::memcpy(changed.data() + offset, &value, sizeof value);
    return binary_error(changed);
  };
  EXPECT_THAT(with(0, uint32_t{0x12345678}), HasSubstr("not a lookup request"));
  EXPECT_THAT(with(4, uint32_t{3}), HasSubstr("version 3, this server reads version 2"));
  EXPECT_THAT(with(8, uint32_t{3}), HasSubstr("3 features, the model has 4"));
  EXPECT_THAT(with(12, uint32_t{1}), HasSubstr("reserved header word"));
  // Feature 0: examples at 24, total ids at 32, has-weights at 40, offsets from 48.
  EXPECT_THAT(with(24, int64_t{-1}), HasSubstr("no examples"));
  EXPECT_THAT(with(24, int64_t{1} << 62), HasSubstr("more than --max-examples"));
  EXPECT_THAT(with(32, int64_t{1} << 61), HasSubstr("offsets must start at 0 and end at"));
  EXPECT_THAT(with(40, uint32_t{2}), HasSubstr("has-weights must be 0 or 1"));
  EXPECT_THAT(with(48, int64_t{1}), HasSubstr("offsets must start at 0"));
  EXPECT_THAT(with(56, int64_t{-1}), HasSubstr("offsets decrease at example"));
}

// Weights that JSON cannot carry, as a binary body can: a non-finite weight is refused by the
// lookup, naming the feature.
TEST_F(RequestCodecTest, NonFiniteBinaryWeightsAreRefused) {
  const test::RandomBatch batch{.examples = 1,
                                .ids = {{1}, {2}, {3}, {4}},
                                .row_splits = {{0, 1}, {0, 1}, {0, 1}, {0, 1}},
                                .weights = {{std::numeric_limits<float>::quiet_NaN()}, {}, {}, {}}};
  const LookupRequest request =
      decode_binary_lookup(test::binary_body(batch), model_, feature_fingerprint(model_), {});
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>([&] { look_up_binary(model_, request, {}); }),
              HasSubstr("not finite"));
}

// A model of features `names` (in that order), each of its own table "t_NAME" of 10 rows and dim
// 2 (dynamic where `dynamic` says), exported into `dir`.
ServingModel model_of(const recemb::test::TemporaryDirectory& dir,
                      const std::vector<std::string>& names, const std::vector<bool>& dynamic) {
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  for (size_t f = 0; f < names.size(); ++f) {
    TableConfig table{.name = "t_" + names[f], .vocabulary_size = 10, .dim = 2};
    if (dynamic[f]) {
      table.vocabulary_size = 0;
      table.dynamic_vocabulary = DynamicVocabulary{.capacity = 10};
    }
    tables.push_back(table);
    features.push_back({.name = names[f], .table = table.name});
  }
  std::string file;  // x.y_dynamic.recemb
  for (size_t f = 0; f < names.size(); ++f) file += names[f] + (dynamic[f] ? "_dynamic." : ".");
  const auto path = dir.path() / (file + "recemb");
  export_serving_model(Embedding(tables, features), path, {});
  return ServingModel::open(path);
}

// The fingerprint is the hash docs/serving.md specifies, and tells apart the features' order, their
// names and which tables are dynamic.
TEST_F(RequestCodecTest, TheFeatureFingerprintIsTheDocumentedHash) {
  EXPECT_EQ(feature_fingerprint(model_), test::lookup_fingerprint());
  EXPECT_EQ(fingerprint_text(0x0123456789abcdefULL), "0123456789abcdef");
  EXPECT_EQ(fingerprint_text(0xf00ULL), "0000000000000f00");
  const std::vector<std::pair<std::vector<std::string>, std::vector<bool>>> cases = {
      {{"x", "y"}, {false, false}},
      {{"y", "x"}, {false, false}},
      {{"x", "y"}, {false, true}},
      {{"x", "yy"}, {false, false}},
      {{"xy"}, {false}},
      {{"x"}, {false}}};
  std::vector<uint64_t> fingerprints;
  for (const auto& [names, dynamic] : cases) {
    const recemb::test::TemporaryDirectory dir;
    const ServingModel model = model_of(dir, names, dynamic);
    fingerprints.push_back(feature_fingerprint(model));
    EXPECT_EQ(fingerprints.back(), test::fingerprint_of(names, dynamic)) << names[0];
  }
  std::sort(fingerprints.begin(), fingerprints.end());
  EXPECT_EQ(std::unique(fingerprints.begin(), fingerprints.end()), fingerprints.end());
}

// A body encoded for the features in one order is refused by a model whose features are in
// another (as after a hot swap): never read with one feature's ids as another's. A body of
// version 1, which had no fingerprint, is refused saying what changed.
TEST_F(RequestCodecTest, ABodyEncodedForAnotherFeatureOrderIsRefused) {
  const recemb::test::TemporaryDirectory dir;
  const ServingModel xy = model_of(dir, {"x", "y"}, {false, false});
  const ServingModel yx = model_of(dir, {"y", "x"}, {false, false});
  const test::RandomBatch batch{
      .examples = 1, .ids = {{1}, {2}}, .row_splits = {{0, 1}, {0, 1}}, .weights = {{}, {}}};
  const std::string body = test::binary_body(batch, feature_fingerprint(xy));
  EXPECT_EQ(decode_binary_lookup(body, xy, feature_fingerprint(xy), {}).features[0].ids,
            (std::vector<int64_t>{1}));
  const std::string message = recemb::test::error_of<FeatureOrderConflict>(
      [&] { decode_binary_lookup(body, yx, feature_fingerprint(yx), {}); });
  EXPECT_THAT(message, HasSubstr("encoded for the feature fingerprint " +
                                 fingerprint_text(feature_fingerprint(xy))));
  EXPECT_THAT(message, HasSubstr("fingerprint " + fingerprint_text(feature_fingerprint(yx))));
  EXPECT_THAT(message, HasSubstr("read the model's description again (GET /v1/models/NAME)"));

  // Version 1: the 16-byte header, then the features.
  std::string version_1 = body.substr(0, 16) + body.substr(24);
  const uint32_t one = 1;
  std::memcpy(version_1.data() + 4, &one, sizeof one);
  EXPECT_THAT(binary_error(version_1),
              HasSubstr("version 1, this server reads version 2 (version 1 carried no feature "
                        "fingerprint"));
}

// An answer that would take more than the budget (with the request) is refused before anything
// is looked up or allocated: the binary answer's exact size is the bound, the JSON one's at most
// its activations and text's bound.
TEST_F(RequestCodecTest, AnswersBeyondTheBudgetAreRefused) {
  std::mt19937_64 random(19);
  for (int round = 0; round < 10; ++round) {
    const test::RandomBatch batch = test::random_batch(random, 1 + round * 5);
    const LookupRequest request = decode_json_lookup(test::json_body(batch), model_, {});
    const std::string binary = look_up_binary(model_, request, {});
    const int64_t exact = request.bytes() + static_cast<int64_t>(binary.size());
    EXPECT_EQ(look_up_binary(model_, request, {.max_request_memory = exact}), binary);
    EXPECT_THAT(recemb::test::error_of<RequestTooLarge>(
                    [&] { look_up_binary(model_, request, {.max_request_memory = exact - 1}); }),
                HasSubstr("more than --max-request-memory " + std::to_string(exact - 1)));
    const std::string json = look_up_json(model_, request, {});
    // At least the activations and the text are counted.
    int64_t values = 0;
    for (const auto& activation : test::reference_activations(model_, batch)) {
      values += static_cast<int64_t>(activation.size());
    }
    const int64_t below = request.bytes() + 4 * values + static_cast<int64_t>(json.size()) - 1;
    EXPECT_THROW(look_up_json(model_, request, {.max_request_memory = below}), RequestTooLarge);
  }
  // A sequence feature of a million positions: 4096 examples would answer 1 TiB; refused at once,
  // naming the feature and its activation's shape.
  const recemb::test::TemporaryDirectory dir;
  const auto path = dir.path() / "long.recemb";
  export_serving_model(Embedding({{.name = "t", .vocabulary_size = 10, .dim = 64}},
                                 {{.name = "s", .table = "t", .max_sequence_length = 1000000}}),
                       path, {});
  const ServingModel model = ServingModel::open(path);
  std::string examples = "[1]";
  for (int e = 1; e < 4096; ++e) examples += ", [1]";
  const LookupRequest request =
      decode_json_lookup(R"({"inputs": {"s": [)" + examples + "]}}", model, {});
  for (const bool binary : {false, true}) {
    const std::string message = recemb::test::error_of<RequestTooLarge>(
        [&] { binary ? look_up_binary(model, request, {}) : look_up_json(model, request, {}); });
    EXPECT_THAT(message, HasSubstr("the largest, feature 's', has shape [4096, 1000000, 64]"));
    EXPECT_THAT(message, HasSubstr("more than --max-request-memory 268435456 bytes: ask for fewer "
                                   "examples a request (or raise --max-request-memory)"));
  }
}

TEST(RequestCodec, Predictions) {
  const PredictRequest request = decode_json_instances(R"({"instances": ["a\tb", "c"]})", 2);
  EXPECT_EQ(request.lines, (std::vector<std::string>{"a\tb", "c"}));
  EXPECT_EQ(request.labels, dlrm::CriteoLabel::kFromFieldCount);
  EXPECT_EQ(decode_json_instances(R"({"labels": "no", "instances": ["a"]})", 2).labels,
            dlrm::CriteoLabel::kAbsent);
  EXPECT_EQ(decode_json_instances(R"({"instances": ["a"], "labels": "yes"})", 2).labels,
            dlrm::CriteoLabel::kPresent);
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>(
                  [] { decode_json_instances(R"({"instances": ["a"], "labels": "maybe"})", 2); }),
              HasSubstr("\"labels\" must be \"yes\""));
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>(
                  [] { decode_json_instances(R"({"instances": ["a"], "label": "yes"})", 2); }),
              HasSubstr("unknown field 'label'"));
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>(
                  [] { decode_json_instances(R"({"instances": ["a", 1]})", 5); }),
              HasSubstr("instance 1: not a string"));
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>(
                  [] { decode_json_instances(R"({"instances": ["a", "b"]})", 1); }),
              HasSubstr("2 instances, more than --max-examples 1"));
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>(
                  [] { decode_json_instances(R"({"instances": []})", 1); }),
              HasSubstr("empty"));
  const std::vector<float> probabilities = {0.1f, 1e-7f, 0.123456789f};
  const nlohmann::json answer = nlohmann::json::parse(encode_json_predictions(probabilities));
  ASSERT_EQ(answer["predictions"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(answer["predictions"][i].get<float>(), probabilities[i]);
}

}  // namespace
}  // namespace recemb::serve

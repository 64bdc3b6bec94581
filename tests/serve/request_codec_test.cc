#include "serve/request_codec.h"

#include <cstring>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

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
      decode_json_lookup(body, model_, max_examples);
    } catch (const InvalidArgument& error) {
      return error.what();
    }
    return "";
  }
  std::string binary_error(const std::string& body, int64_t max_examples = 100) {
    try {
      decode_binary_lookup(body, model_, max_examples);
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

    const Activations from_json =
        look_up(model_, decode_json_lookup(test::json_body(batch), model_, 100));
    const nlohmann::json answer = nlohmann::json::parse(encode_json_activations(model_, from_json));
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

    const std::string encoded =
        look_up_binary(model_, decode_binary_lookup(test::binary_body(batch), model_, 100));
    // Header, then per feature: rank, shape, values.
    uint32_t header[4];
    std::memcpy(header, encoded.data(), sizeof header);
    EXPECT_EQ(header[0], kBinaryAnswerMagic);
    EXPECT_EQ(header[1], 1u);
    EXPECT_EQ(header[2], 4u);
    size_t offset = sizeof header;
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
      model_, 10);
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
  EXPECT_THAT(json_error("{"), HasSubstr("not JSON"));
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
              HasSubstr("nest deeper than 5 levels"));
  EXPECT_THAT(json_error(R"({"inputs": {"a": 5, )" + good_rest + "}}"),
              HasSubstr("feature 'a' must be a list of examples"));
  // An id out of range is refused by the lookup, naming the feature.
  const LookupRequest out_of_range =
      decode_json_lookup(R"({"inputs": {"a": [[50]], )" + good_rest + "}}", model_, 10);
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>([&] { look_up(model_, out_of_range); }),
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
              HasSubstr("binary body: feature 0 ('a') examples (1 x 8 bytes at byte 16) runs past "
                        "the end of the body (20 bytes)"));
  EXPECT_THAT(binary_error(body.substr(0, 50)),
              HasSubstr("binary body: feature 0 ('a') offsets (4 x 8 bytes at byte 40)"));
  EXPECT_THAT(binary_error(body + "x"), HasSubstr("1 bytes after the last feature"));
  EXPECT_EQ(binary_error(body), "");
  EXPECT_THAT(binary_error(body, 2), HasSubstr("more than --max-examples 2"));

  const auto with = [&](size_t offset, const auto value) {
    std::string changed = body;
    std::memcpy(changed.data() + offset, &value, sizeof value);
    return binary_error(changed);
  };
  EXPECT_THAT(with(0, uint32_t{0x12345678}), HasSubstr("not a lookup request"));
  EXPECT_THAT(with(4, uint32_t{2}), HasSubstr("version 2"));
  EXPECT_THAT(with(8, uint32_t{3}), HasSubstr("3 features, the model has 4"));
  EXPECT_THAT(with(12, uint32_t{1}), HasSubstr("reserved header word"));
  // Feature 0: examples at 16, total ids at 24, has-weights at 32, offsets from 40.
  EXPECT_THAT(with(16, int64_t{-1}), HasSubstr("no examples"));
  EXPECT_THAT(with(16, int64_t{1} << 62), HasSubstr("more than --max-examples"));
  EXPECT_THAT(with(24, int64_t{1} << 61), HasSubstr("offsets must start at 0 and end at"));
  EXPECT_THAT(with(32, uint32_t{2}), HasSubstr("has-weights must be 0 or 1"));
  EXPECT_THAT(with(40, int64_t{1}), HasSubstr("offsets must start at 0"));
  EXPECT_THAT(with(48, int64_t{-1}), HasSubstr("offsets decrease at example"));
}

// Weights that JSON cannot carry, as a binary body can: a non-finite weight is refused by the
// lookup, naming the feature.
TEST_F(RequestCodecTest, NonFiniteBinaryWeightsAreRefused) {
  const test::RandomBatch batch{.examples = 1,
                                .ids = {{1}, {2}, {3}, {4}},
                                .row_splits = {{0, 1}, {0, 1}, {0, 1}, {0, 1}},
                                .weights = {{std::numeric_limits<float>::quiet_NaN()}, {}, {}, {}}};
  const LookupRequest request = decode_binary_lookup(test::binary_body(batch), model_, 10);
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>([&] { look_up(model_, request); }),
              HasSubstr("not finite"));
}

TEST(RequestCodec, Predictions) {
  EXPECT_EQ(decode_json_instances(R"({"instances": ["a\tb", "c"]})", 2),
            (std::vector<std::string>{"a\tb", "c"}));
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

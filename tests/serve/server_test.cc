#include "serve/server.h"

#include <cstring>
#include <future>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "serve/request_codec.h"
#include "serve/serving_fixtures.h"
#include "testing/criteo_lines.h"
#include "testing/http_client.h"
#include "testing/temporary_directory.h"
#include "train/predictor.h"

namespace recemb::serve {
namespace {

using ::testing::HasSubstr;

// Models: "emb" versions 1 and 2 (lookup_embedding of seeds 1 and 2; 2 is served) and "ctr"
// version 5, a trained click model with a dense part.
class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = new recemb::test::TemporaryDirectory();
    test::export_to(test::lookup_embedding(1), *models_ / "emb/1");
    test::export_to(test::lookup_embedding(2), *models_ / "emb/2");
    const recemb::test::TemporaryDirectory work;
    test::train_and_export(work.path(), *models_ / "ctr/5");
  }
  static void TearDownTestSuite() { delete models_; }

  static std::shared_ptr<const ModelRegistry> registry() {
    std::ostringstream log;
    return std::make_shared<const ModelRegistry>(models_->path(), log);
  }

  static HttpResponse post(Server& server, const std::string& path, const std::string& body,
                           const std::string& type = "application/json") {
    return server.handle({.method = "POST", .path = path, .content_type = type, .body = body});
  }

  // The activations of a JSON answer, per feature, flattened.
  static std::vector<std::vector<float>> json_activations(const std::string& body) {
    const nlohmann::json answer = nlohmann::json::parse(body);
    std::vector<std::vector<float>> result;
    for (const char* name : {"a", "b", "s", "user"}) {
      result.emplace_back();
      test::flatten(answer.at("outputs").at(name), result.back());
    }
    return result;
  }

  // The activations of a binary answer, per feature.
  static std::vector<std::vector<float>> binary_activations(const std::string& body) {
    std::vector<std::vector<float>> result;
    size_t offset = 16;
    while (offset < body.size()) {
      uint32_t rank = 0;
      std::memcpy(&rank, body.data() + offset, 4);
      offset += 8;
      int64_t size = 1;
      for (uint32_t d = 0; d < rank; ++d, offset += 8) {
        int64_t extent = 0;
        std::memcpy(&extent, body.data() + offset, 8);
        size *= extent;
      }
      result.emplace_back(static_cast<size_t>(size));
      std::memcpy(result.back().data(), body.data() + offset, result.back().size() * 4);
      offset += result.back().size() * 4;
    }
    return result;
  }

  static void expect_bitwise_equal(const std::vector<std::vector<float>>& got,
                                   const std::vector<std::vector<float>>& expected) {
    ASSERT_EQ(got.size(), expected.size());
    for (size_t f = 0; f < got.size(); ++f) {
      ASSERT_EQ(got[f].size(), expected[f].size()) << f;
      EXPECT_EQ(std::memcmp(got[f].data(), expected[f].data(), got[f].size() * 4), 0) << f;
    }
  }

  static recemb::test::TemporaryDirectory* models_;
};

recemb::test::TemporaryDirectory* ServerTest::models_ = nullptr;

TEST_F(ServerTest, LookupsEqualTheServedModelsBitwise) {
  Server server(registry(), {});
  const ServingModel reference = ServingModel::open(*models_ / "emb/2/model.recemb");
  std::mt19937_64 random(41);
  for (int round = 0; round < 10; ++round) {
    const test::RandomBatch batch = test::random_batch(random, 1 + round * 3);
    const auto expected = test::reference_activations(reference, batch);
    const std::string path =
        round % 2 == 0 ? "/v1/models/emb:lookup" : "/v1/models/emb/versions/2:lookup";
    HttpResponse json = post(server, path, test::json_body(batch));
    ASSERT_EQ(json.status, 200) << json.body;
    EXPECT_EQ(json.content_type, "application/json");
    expect_bitwise_equal(json_activations(json.body), expected);
    HttpResponse binary = post(server, path, test::binary_body(batch), "application/octet-stream");
    ASSERT_EQ(binary.status, 200) << binary.body;
    EXPECT_EQ(binary.content_type, "application/octet-stream");
    expect_bitwise_equal(binary_activations(binary.body), expected);
  }
  EXPECT_THAT(server.metrics().render(), HasSubstr("recemb_serve_rows_total{model=\"emb\"} 290\n"));
}

TEST_F(ServerTest, PredictionsEqualThePredictors) {
  Server server(registry(), {});
  train::Predictor predictor = train::Predictor::open(*models_ / "ctr/5");
  std::mt19937_64 random(9);
  std::vector<std::string> lines;
  nlohmann::json instances = nlohmann::json::array();
  for (int i = 0; i < 40; ++i) {
    lines.push_back(recemb::test::random_criteo_line(random));
    instances.push_back(lines.back());
  }
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  std::vector<train::Prediction> expected(lines.size());
  predictor.predict(views, expected);
  const HttpResponse answer =
      post(server, "/v1/models/ctr:predict", nlohmann::json{{"instances", instances}}.dump());
  ASSERT_EQ(answer.status, 200) << answer.body;
  const nlohmann::json predictions = nlohmann::json::parse(answer.body).at("predictions");
  ASSERT_EQ(predictions.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_TRUE(expected[i].error.empty()) << expected[i].error;
    EXPECT_EQ(predictions[i].get<float>(), expected[i].probability) << i;
  }
  // A line of 39 fields (without its label, or a labelled one that lost its last tab: the
  // label's presence cannot be told) is refused, not read with its fields shifted.
  nlohmann::json with_ambiguous = instances;
  with_ambiguous[1] = recemb::test::random_criteo_line(random, false);
  HttpResponse ambiguous =
      post(server, "/v1/models/ctr:predict", nlohmann::json{{"instances", with_ambiguous}}.dump());
  EXPECT_EQ(ambiguous.status, 400);
  EXPECT_THAT(ambiguous.body, HasSubstr("instance 1: 39 tab-separated fields"));
  // A bad line: 400 naming the instance; a model without a dense part cannot predict.
  instances[2] = "1\t2\t3";
  HttpResponse bad =
      post(server, "/v1/models/ctr:predict", nlohmann::json{{"instances", instances}}.dump());
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("instance 2: "));
  bad = post(server, "/v1/models/emb:predict", R"({"instances": ["1"]})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("model 'emb' cannot predict"));
}

TEST_F(ServerTest, DescribesModels) {
  Server server(registry(), {});
  const HttpResponse answer = server.handle({.method = "GET", .path = "/v1/models/emb"});
  ASSERT_EQ(answer.status, 200) << answer.body;
  const nlohmann::json description = nlohmann::json::parse(answer.body);
  EXPECT_EQ(description["name"], "emb");
  EXPECT_EQ(description["version"], 2);
  EXPECT_EQ(description["versions"], nlohmann::json::parse("[1, 2]"));
  EXPECT_EQ(description["delta_sequence"], 0);
  EXPECT_EQ(description["predict"], false);
  ASSERT_EQ(description["tables"].size(), 3u);
  EXPECT_EQ(description["tables"][0]["name"], "t");
  EXPECT_EQ(description["tables"][0]["dim"], 3);
  EXPECT_EQ(description["tables"][0]["dtype"], "float32");
  EXPECT_EQ(description["tables"][0]["dynamic"], false);
  EXPECT_EQ(description["tables"][2]["dynamic"], true);
  EXPECT_EQ(description["tables"][2]["keys"], 4);
  ASSERT_EQ(description["features"].size(), 4u);
  EXPECT_EQ(description["features"][2]["max_sequence_length"], 3);
  const nlohmann::json ctr = nlohmann::json::parse(
      server.handle({.method = "GET", .path = "/v1/models/ctr/versions/5"}).body);
  EXPECT_EQ(ctr["predict"], true);
  EXPECT_EQ(ctr["features"].size(), 26u);
  // recemb export records the step trained to: 320 of the fixture's 384 lines train (the rest are
  // held out), 32 a step. The "emb" model, not exported from a checkpoint, has none.
  EXPECT_EQ(ctr["step"], 10);
  EXPECT_FALSE(description.contains("step"));
  EXPECT_EQ(server.handle({.method = "GET", .path = "/healthz"}).status, 200);
}

// Each bad request gets its 4xx and an error naming what was wrong; the server keeps serving.
TEST_F(ServerTest, BadRequestsGetErrorsNamingWhatIsWrong) {
  Server server(registry(), {.max_body_bytes = 4000, .max_examples = 3});
  std::mt19937_64 random(2);
  const std::string good = test::json_body(test::random_batch(random, 2));
  struct Case {
    HttpRequest request;
    int status;
    std::string code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"POST", "/v1/models/nope:lookup", "", good}, 404, "NotFound", "model 'nope' is not served"},
      {{"POST", "/v1/models/..:lookup", "", good}, 404, "NotFound", "is not served"},
      {{"POST", "/v1/models/emb/versions/1:lookup", "", good},
       404,
       "NotFound",
       "version 1 is not served (serving version 2)"},
      {{"POST", "/v1/models/emb/versions/x:lookup", "", good}, 404, "NotFound", "VERSION"},
      {{"POST", "/v1/models/emb:classify", "", good},
       404,
       "NotFound",
       "unknown method ':classify'"},
      {{"GET", "/v1/models/emb:lookup", "", ""}, 405, "MethodNotAllowed", "use POST"},
      {{"POST", "/v1/models/emb", "", ""}, 405, "MethodNotAllowed", "use GET"},
      {{"GET", "/v2/x", "", ""}, 404, "NotFound", "no such path '/v2/x'"},
      {{"POST", "/v1/models/emb:lookup", "", "{\"inputs\": "}, 400, "InvalidArgument", "not JSON"},
      {{"POST", "/v1/models/emb:lookup", "text/csv", good},
       415,
       "UnsupportedMediaType",
       "Content-Type 'text/csv'"},
      {{"POST", "/v1/models/emb:lookup", "", std::string(4001, ' ')},
       413,
       "PayloadTooLarge",
       "--max-body-bytes 4000"},
      {{"POST", "/v1/models/emb:lookup", "", test::json_body(test::random_batch(random, 4))},
       400,
       "InvalidArgument",
       "more than --max-examples 3"},
      {{"POST", "/v1/models/emb:lookup", "",
        R"({"inputs": {"a": [[99]], "b": [[1]], "s": [[1]], "user": [[1]]}})"},
       400,
       "InvalidArgument",
       "'a'"},
      {{"POST", "/v1/models/emb:lookup", "application/octet-stream", "REBQ"},
       400,
       "InvalidArgument",
       "binary body"},
  };
  for (const Case& c : cases) {
    const HttpResponse answer = server.handle(c.request);
    EXPECT_EQ(answer.status, c.status) << c.request.path << ": " << answer.body;
    const nlohmann::json error = nlohmann::json::parse(answer.body).at("error");
    EXPECT_EQ(error["code"], c.code) << answer.body;
    EXPECT_THAT(error["message"].get<std::string>(), HasSubstr(c.message)) << c.request.path;
  }
  EXPECT_EQ(post(server, "/v1/models/emb:lookup", good).status, 200);
  const std::string metrics = server.handle({.method = "GET", .path = "/metrics"}).body;
  EXPECT_THAT(metrics, HasSubstr("recemb_serve_requests_total{model=\"emb\",method=\"lookup\","
                                 "code=\"200\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("recemb_serve_requests_total{model=\"emb\",method=\"lookup\","
                                 "code=\"400\"} 4\n"));
  EXPECT_THAT(metrics, HasSubstr("recemb_serve_model_version{model=\"emb\"} 2\n"));
}

// Over HTTP, from concurrent clients: every request answered (bounded waits), good ones equal to
// the reference, bad ones with their errors, a body over the limit refused by the HTTP layer.
TEST_F(ServerTest, ConcurrentClientsOverHttp) {
  Server server(registry(), {.max_body_bytes = 1 << 16, .max_examples = 64});
  HttpServer http(
      {.port = 0, .threads = 4, .max_body_bytes = 1 << 16},
      [&](const HttpRequest& request) { return server.handle(request); },
      [&](int status) { return server.refusal(status); });
  std::thread runner([&] { http.run(); });
  const ServingModel reference = ServingModel::open(*models_ / "emb/2/model.recemb");
  std::vector<std::future<int>> clients;
  for (int c = 0; c < 8; ++c) {
    clients.push_back(std::async(std::launch::async, [&, c] {
      recemb::test::HttpClient client("127.0.0.1", http.port());
      std::mt19937_64 random(static_cast<uint64_t>(c));
      int good = 0;
      for (int i = 0; i < 15; ++i) {
        const test::RandomBatch batch = test::random_batch(random, 1 + i);
        if (i % 3 == 2) {
          const auto answer =
              client.post("/v1/models/emb:lookup", "{\"inputs\": [", "application/json");
          EXPECT_TRUE(answer && answer->status == 400);
          continue;
        }
        const bool binary = i % 3 == 1;
        const auto answer = binary ? client.post("/v1/models/emb:lookup", test::binary_body(batch),
                                                 "application/octet-stream")
                                   : client.post("/v1/models/emb:lookup", test::json_body(batch),
                                                 "application/json");
        if (!answer || answer->status != 200) {
          ADD_FAILURE() << (answer ? answer->body : client.error());
          continue;
        }
        expect_bitwise_equal(
            binary ? binary_activations(answer->body) : json_activations(answer->body),
            test::reference_activations(reference, batch));
        ++good;
      }
      return good;
    }));
  }
  for (auto& client : clients) EXPECT_EQ(client.get(), 10);
  recemb::test::HttpClient client("127.0.0.1", http.port());
  const auto too_big =
      client.post("/v1/models/emb:lookup", std::string((1 << 16) + 1, ' '), "application/json");
  ASSERT_TRUE(too_big);
  EXPECT_EQ(too_big->status, 413);
  EXPECT_THAT(too_big->body, HasSubstr("\"code\": \"PayloadTooLarge\""));
  const auto health = client.get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  http.stop();
  runner.join();
}

}  // namespace
}  // namespace recemb::serve

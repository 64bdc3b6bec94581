#include "serve/server.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>

#include "recemb/embedding.h"

#include "dlrm/predictor.h"
#include "serve/request_codec.h"
#include "serve/serving_fixtures.h"
#include "testing/criteo_lines.h"
#include "testing/http_client.h"
#include "testing/temporary_directory.h"

namespace recemb::serve {
namespace {

using ::testing::HasSubstr;

// Models: "emb" versions 1 and 2 (lookup_embedding of seeds 1 and 2; 2 is served), "ctr"
// version 5, a trained click model with a dense part, and "long" version 1, a sequence feature "s"
// of a million positions of dim 64 (1 GiB of activations per 4 examples).
class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = new recemb::test::TemporaryDirectory();
    test::export_to(test::lookup_embedding(1), *models_ / "emb/1");
    test::export_to(test::lookup_embedding(2), *models_ / "emb/2");
    const recemb::test::TemporaryDirectory work;
    test::train_and_export(work.path(), *models_ / "ctr/5");
    std::filesystem::create_directories(*models_ / "long/1");
    export_serving_model(Embedding({{.name = "t", .vocabulary_size = 10, .dim = 64}},
                                   {{.name = "s", .table = "t", .max_sequence_length = 1000000}}),
                         *models_ / "long/1/model.recemb", {});
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
    size_t offset = 24;  // the header and the fingerprint
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
    // Media types in any case, with parameters (RFC 9110).
    HttpResponse json =
        post(server, path, test::json_body(batch),
             round % 3 == 0 ? "application/json" : "Application/JSON; charset=utf-8");
    ASSERT_EQ(json.status, 200) << json.body;
    EXPECT_EQ(json.content_type, "application/json");
    expect_bitwise_equal(json_activations(json.body), expected);
    HttpResponse binary =
        post(server, path, test::binary_body(batch),
             round % 3 == 0 ? "application/octet-stream" : " APPLICATION/OCTET-STREAM");
    ASSERT_EQ(binary.status, 200) << binary.body;
    EXPECT_EQ(binary.content_type, "application/octet-stream");
    expect_bitwise_equal(binary_activations(binary.body), expected);
  }
  EXPECT_THAT(server.metrics().render(), HasSubstr("recemb_serve_rows_total{model=\"emb\"} 290\n"));
}

TEST_F(ServerTest, PredictionsEqualThePredictors) {
  Server server(registry(), {});
  dlrm::Predictor predictor = dlrm::Predictor::open(*models_ / "ctr/5");
  std::mt19937_64 random(9);
  std::vector<std::string> lines;
  nlohmann::json instances = nlohmann::json::array();
  for (int i = 0; i < 40; ++i) {
    lines.push_back(recemb::test::random_criteo_line(random));
    instances.push_back(lines.back());
  }
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  std::vector<dlrm::Prediction> expected(lines.size());
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
  // "labels" settles it as `recemb predict --labels` does: "no", lines of 39 fields without a
  // label; "yes", every line labelled (a 39-field one lost its last, empty field). Each is
  // expected to predict as the unambiguous 40-field line it stands for does by default: with a
  // label put in front ("no"), with its last, empty field restored ("yes").
  for (const bool labelled : {false, true}) {
    std::vector<std::string> settled, unambiguous;
    nlohmann::json settled_instances = nlohmann::json::array();
    for (int i = 0; i < 12; ++i) {
      std::string line = recemb::test::random_criteo_line(random, labelled);
      if (labelled) line = line.substr(0, line.rfind('\t'));  // 39 fields: C26 and its tab lost
      settled.push_back(line);
      settled_instances.push_back(line);
      unambiguous.push_back(labelled ? line + "\t" : "0\t" + line);
    }
    const std::vector<std::string_view> unambiguous_views(unambiguous.begin(), unambiguous.end());
    std::vector<dlrm::Prediction> settled_expected(settled.size());
    predictor.predict(unambiguous_views, settled_expected);
    const HttpResponse settled_answer =
        post(server, "/v1/models/ctr:predict",
             nlohmann::json{{"instances", settled_instances}, {"labels", labelled ? "yes" : "no"}}
                 .dump());
    ASSERT_EQ(settled_answer.status, 200) << settled_answer.body;
    const nlohmann::json settled_predictions =
        nlohmann::json::parse(settled_answer.body).at("predictions");
    ASSERT_EQ(settled_predictions.size(), settled.size());
    for (size_t i = 0; i < settled.size(); ++i) {
      ASSERT_TRUE(settled_expected[i].error.empty()) << settled_expected[i].error;
      EXPECT_EQ(settled_predictions[i].get<float>(), settled_expected[i].probability) << i;
    }
  }
  HttpResponse bad_labels = post(server, "/v1/models/ctr:predict",
                                 nlohmann::json{{"instances", instances}, {"labels", true}}.dump());
  EXPECT_EQ(bad_labels.status, 400);
  EXPECT_THAT(bad_labels.body, HasSubstr("(every line starts with its label) or"));
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
  // What a binary request is encoded against: the hash of the features as docs/serving.md says.
  EXPECT_EQ(description["feature_fingerprint"], fingerprint_text(test::lookup_fingerprint()));
  EXPECT_EQ(description["metadata"], nlohmann::json::object());
  EXPECT_EQ(server.handle({.method = "GET", .path = "/healthz"}).status, 200);
  // GET /v1/models lists the models served, with their versions.
  for (const char* path : {"/v1/models", "/v1/models/"}) {
    const HttpResponse list = server.handle({.method = "GET", .path = path});
    ASSERT_EQ(list.status, 200) << list.body;
    EXPECT_EQ(nlohmann::json::parse(list.body), nlohmann::json::parse(R"({"models": [
        {"name": "ctr", "version": 5, "versions": [5]},
        {"name": "emb", "version": 2, "versions": [1, 2]},
        {"name": "long", "version": 1, "versions": [1]}]})"));
  }
}

// A binary request encoded before a hot swap to a version whose features are in another order is
// refused with 409 (never answered with one feature's rows under another's name); encoded again
// for the new description it is answered as the new version answers it.
TEST_F(ServerTest, ABinaryRequestForAnotherFeatureOrderIsRefusedAfterASwap) {
  const recemb::test::TemporaryDirectory dir;
  const auto export_version = [&](int version, bool swapped) {
    std::vector<TableConfig> tables(2);
    std::vector<FeatureConfig> features(2);
    for (size_t f = 0; f < 2; ++f) {
      const std::string name = (f == 0) != swapped ? "x" : "y";
      tables[f] = {.name = "t" + name, .vocabulary_size = 10, .dim = 2};
      features[f] = {.name = name, .table = "t" + name};
    }
    Embedding embedding(tables, features, {.seed = static_cast<uint64_t>(version)});
    test::export_to(embedding, dir.path() / "swap" / std::to_string(version));
    return ServingModel::open(dir.path() / "swap" / std::to_string(version) / "model.recemb");
  };
  const ServingModel first = export_version(1, false);
  std::ostringstream log;
  auto models = std::make_shared<ModelRegistry>(dir.path(), log);
  Server server(models, {});
  const auto describe = [&] {
    return nlohmann::json::parse(server.handle({.method = "GET", .path = "/v1/models/swap"}).body);
  };
  // x's ids 1 and 2, y's 3 (two examples).
  const auto batch_for = [](bool swapped) {
    test::RandomBatch batch{.examples = 2, .ids = {}, .row_splits = {}, .weights = {{}, {}}};
    const std::vector<int64_t> x = {1, 2}, y = {3, 3};
    batch.ids = swapped ? std::vector{y, x} : std::vector{x, y};
    batch.row_splits = {{0, 1, 2}, {0, 1, 2}};
    return batch;
  };
  const auto fingerprint_of = [](const nlohmann::json& description) {
    return std::stoull(description["feature_fingerprint"].get<std::string>(), nullptr, 16);
  };
  const std::string before = test::binary_body(batch_for(false), fingerprint_of(describe()));
  HttpResponse answer = post(server, "/v1/models/swap:lookup", before, "application/octet-stream");
  ASSERT_EQ(answer.status, 200) << answer.body;
  expect_bitwise_equal(binary_activations(answer.body),
                       test::reference_activations(first, batch_for(false)));

  const ServingModel second = export_version(2, true);
  ASSERT_EQ(models->refresh(), 1);
  answer = post(server, "/v1/models/swap:lookup", before, "application/octet-stream");
  EXPECT_EQ(answer.status, 409);
  const nlohmann::json error = nlohmann::json::parse(answer.body)["error"];
  EXPECT_EQ(error["code"], "Conflict");
  EXPECT_THAT(error["message"].get<std::string>(),
              HasSubstr("model 'swap' version 2: binary body: encoded for the feature "
                        "fingerprint"));
  EXPECT_THAT(error["message"].get<std::string>(),
              HasSubstr("read the model's description again (GET /v1/models/NAME)"));
  // Encoded again, in the new order.
  const nlohmann::json description = describe();
  EXPECT_EQ(description["features"][0]["name"], "y");
  answer = post(server, "/v1/models/swap:lookup",
                test::binary_body(batch_for(true), fingerprint_of(description)),
                "application/octet-stream");
  ASSERT_EQ(answer.status, 200) << answer.body;
  expect_bitwise_equal(binary_activations(answer.body),
                       test::reference_activations(second, batch_for(true)));
}

// A request whose ids, or whose answer, would take more than --max-request-memory is refused with
// 413 naming the limit, before the memory is taken; the server goes on serving.
TEST_F(ServerTest, RequestsBeyondTheMemoryBudgetAreRefused) {
  Server server(registry(), {.limits = {.max_request_memory = 4000}});
  std::string ids = "1";
  for (int i = 0; i < 1000; ++i) ids += ", 1";
  const std::vector<HttpRequest> refused = {
      {"POST", "/v1/models/emb:lookup", "application/json",
       R"({"inputs": {"a": [[)" + ids + R"(]], "b": [1], "s": [1], "user": [1]}})"},
      {"POST", "/v1/models/long:lookup", "application/json", R"({"inputs": {"s": [[1]]}})"},
      {"POST", "/v1/models/long:lookup", "",
       R"({"inputs": {"s": [[1], [2], [3], [4], [5], [6], [7], [8]]}})"},
  };
  for (const HttpRequest& request : refused) {
    const HttpResponse answer = server.handle(request);
    EXPECT_EQ(answer.status, 413) << answer.body;
    const nlohmann::json error = nlohmann::json::parse(answer.body)["error"];
    EXPECT_EQ(error["code"], "PayloadTooLarge");
    EXPECT_THAT(error["message"].get<std::string>(),
                HasSubstr("more than --max-request-memory 4000"));
  }
  std::mt19937_64 random(4);
  EXPECT_EQ(
      post(server, "/v1/models/emb:lookup", test::json_body(test::random_batch(random, 2))).status,
      200);
}

// An allocation that fails while a request is answered (here: the address space limited, the
// budget lifted, a 26 GB answer asked for) is answered with 503, and the server goes on. In a
// child process, whose address space is limited.
TEST_F(ServerTest, AnAllocationThatFailsIsAnswered503) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers reserve more address space than the limit leaves";
#endif
  const auto answer_under_limit = [] {
    Server server(registry(), {.limits = {.max_request_memory = int64_t{1} << 62}});
    std::ifstream statm("/proc/self/statm");
    uint64_t pages = 0;
    statm >> pages;
    const rlim_t limit =
        pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) + (uint64_t{512} << 20);
    const rlimit address_space{.rlim_cur = limit, .rlim_max = limit};
    if (setrlimit(RLIMIT_AS, &address_space) != 0) std::exit(2);
    std::string examples = "[1]";
    for (int e = 1; e < 100; ++e) examples += ", [1]";
    int failures = 0;
    for (const char* type : {"application/json", "application/octet-stream"}) {
      std::string body = R"({"inputs": {"s": [)" + examples + "]}}";
      if (std::string(type) == "application/octet-stream") {
        test::RandomBatch batch{.examples = 100,
                                .ids = {std::vector<int64_t>(100, 1)},
                                .row_splits = {{}},
                                .weights = {{}}};
        for (int64_t e = 0; e <= 100; ++e) batch.row_splits[0].push_back(e);
        body = test::binary_body(batch, test::fingerprint_of({"s"}, {false}));
      }
      const HttpResponse answer = post(server, "/v1/models/long:lookup", body, type);
      failures +=
          answer.status != 503 || answer.body.find("\"ResourceExhausted\"") == std::string::npos;
    }
    std::mt19937_64 random(4);
    failures +=
        post(server, "/v1/models/emb:lookup", test::json_body(test::random_batch(random, 2)))
            .status != 200;
    std::exit(failures);
  };
  EXPECT_EXIT(answer_under_limit(), ::testing::ExitedWithCode(0), "");
}

// Each bad request gets its 4xx and an error naming what was wrong; the server keeps serving.
TEST_F(ServerTest, BadRequestsGetErrorsNamingWhatIsWrong) {
  Server server(registry(), {.max_body_bytes = 4000, .limits = {.max_examples = 3}});
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
      {{"POST", "/v1/models/emb:lookup", "", "{\"inputs\": "},
       400,
       "InvalidArgument",
       "not valid JSON"},
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
      {{"POST", "/v1/models/emb:lookup", "application/octet-stream",
        test::binary_body(test::random_batch(random, 1), 12345)},
       409,
       "Conflict",
       "model 'emb' version 2: binary body: encoded for the feature fingerprint 0000000000003039"},
      {{"POST", "/v1/models/emb:lookup", "Text/CSV; charset=utf-8", good},
       415,
       "UnsupportedMediaType",
       "Content-Type 'Text/CSV; charset=utf-8'"},
      {{"GET", "/v1/models:lookup", "", ""}, 404, "NotFound", "no such path"},
      {{"POST", "/v1/models", "", ""}, 405, "MethodNotAllowed", "use GET"},
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
  EXPECT_THAT(metrics, HasSubstr("recemb_serve_requests_total{model=\"emb\",method=\"lookup\","
                                 "code=\"409\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("recemb_serve_model_version{model=\"emb\"} 2\n"));
}

// Over HTTP, from concurrent clients: every request answered (bounded waits), good ones equal to
// the reference, bad ones with their errors, a body over the limit refused by the HTTP layer.
TEST_F(ServerTest, ConcurrentClientsOverHttp) {
  Server server(registry(), {.max_body_bytes = 1 << 16, .limits = {.max_examples = 64}});
  HttpServer http(
      {.port = 0, .threads = 4, .max_body_bytes = 1 << 16},
      [&](const HttpRequest& request) { return server.handle(request); },
      [&](const HttpRefusal& refusal) { return server.refusal(refusal); });
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
  EXPECT_THAT(too_big->body, HasSubstr("longer than --max-body-bytes 65536"));
  const auto health = client.get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  http.stop();
  runner.join();
}

}  // namespace
}  // namespace recemb::serve

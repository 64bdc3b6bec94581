#include "tools/recemb/serve_command.h"

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <regex>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <thread>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"

#include "testing/error_of.h"
#include "testing/http_client.h"
#include "testing/shell_command.h"
#include "testing/temporary_directory.h"

extern char** environ;

namespace recemb::tools {
namespace {

using recemb::test::error_of;
using ::testing::HasSubstr;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(ServeCommand, ListenAddresses) {
  const ListenAddress v4 = parse_listen_address("127.0.0.1:8500");
  EXPECT_EQ(v4.host, "127.0.0.1");
  EXPECT_EQ(v4.port, 8500);
  const ListenAddress v6 = parse_listen_address("[::1]:0");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 0);
  for (const char* bad : {"8500", ":8500", "localhost:", "h:65536", "h:-1", "h:80x"}) {
    EXPECT_THAT(error_of<InvalidArgument>([bad] { parse_listen_address(bad); }),
                HasSubstr("expected HOST:PORT"))
        << bad;
  }
}

// Without polling (--poll-seconds 0), a directory with no model is an error; with polling it is
// served, empty, until a model appears (tests/python/test_serve.py).
TEST(ServeCommand, NoModelWithoutPollingExitsTwoSayingTheLayout) {
  recemb::test::TemporaryDirectory dir;
  const recemb::test::CommandOutcome outcome =
      recemb::test::run_shell_command("timeout 60 " RECEMB_CLI " serve " + dir.path().string() +
                                      " --listen 127.0.0.1:0 --poll-seconds 0");
  EXPECT_EQ(outcome.status, 2) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("no model to serve"));
  EXPECT_THAT(outcome.output, HasSubstr("expected MODEL_DIR/NAME/VERSION/model.recemb"));
}

// The program serves until SIGTERM, then stops and exits 0; its log names the model, the address
// and the threads.
TEST(ServeCommand, ServesUntilSigterm) {
  recemb::test::TemporaryDirectory dir;
  std::filesystem::create_directories(dir / "models/emb/3");
  Embedding embedding({{.name = "t", .vocabulary_size = 10, .dim = 2, .combiner = Combiner::kSum}},
                      {{.name = "a", .table = "t"}}, {.seed = 4});
  export_serving_model(embedding, dir / "models/emb/3/model.recemb");
  std::vector<float> rows(20);
  embedding.read_variable("t", "parameters", rows);

  const std::string log = (dir / "log").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const std::string models = (dir / "models").string();
  const char* arguments[] = {RECEMB_CLI, "serve",       models.c_str(),
                             "--listen", "127.0.0.1:0", nullptr};
  pid_t pid = 0;
  ASSERT_EQ(
      posix_spawn(&pid, RECEMB_CLI, &actions, nullptr, const_cast<char**>(arguments), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  int port = 0;
  const std::regex listening("listening on 127\\.0\\.0\\.1:([0-9]+)");
  for (int tick = 0; tick < 3000 && port == 0; ++tick) {  // 10 ms each: 30 s at most
    std::smatch match;
    const std::string text = read_file(log);
    if (std::regex_search(text, match, listening)) port = std::stoi(match[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (port != 0) {
    recemb::test::HttpClient client("127.0.0.1", port);
    const auto answer = client.post("/v1/models/emb:lookup", R"({"inputs": {"a": [[1, 4], []]}})",
                                    "application/json");
    EXPECT_TRUE(answer && answer->status == 200);
    if (answer) {
      const nlohmann::json outputs = nlohmann::json::parse(answer->body)["outputs"]["a"];
      for (int d = 0; d < 2; ++d) {
        EXPECT_EQ(outputs[0][d].get<float>(), rows[2 + d] + rows[8 + d]);
        EXPECT_EQ(outputs[1][d].get<float>(), 0.0f);
      }
    }
  }
  kill(pid, SIGTERM);
  int status = -1;
  for (int tick = 0; tick < 3000; ++tick) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (tick == 2999) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "recemb serve did not stop within 30 s of SIGTERM";
    }
  }
  const std::string text = read_file(log);
  ASSERT_NE(port, 0) << text;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << text;
  EXPECT_THAT(text, HasSubstr("serving model 'emb' version 3"));
  // An event loop thread per core by default.
  const auto cores = std::max(std::thread::hardware_concurrency(), 1U);
  EXPECT_THAT(text, HasSubstr("listening on 127.0.0.1:" + std::to_string(port) + " (" +
                              std::to_string(cores) + " threads)"));
  EXPECT_THAT(text, HasSubstr("SIGTERM: stopping"));
  EXPECT_THAT(text, HasSubstr("recemb serve: stopped"));
}

}  // namespace
}  // namespace recemb::tools

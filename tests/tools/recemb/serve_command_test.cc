#include "tools/recemb/serve_command.h"

#include <chrono>
#include <cmath>
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
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"

#include "serving/format.h"
#include "testing/error_of.h"
#include "testing/http_client.h"
#include "testing/shell_command.h"
#include "testing/temporary_directory.h"

extern char** environ;

namespace recemb::tools {
namespace {

using recemb::test::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// `recemb serve ARGUMENTS`, its stderr to `log`; its pid (0 when it could not start).
pid_t spawn_server(const std::vector<std::string>& arguments, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<const char*> argv = {RECEMB_CLI, "serve"};
  for (const std::string& argument : arguments) argv.push_back(argument.c_str());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int error =
      posix_spawn(&pid, RECEMB_CLI, &actions, nullptr, const_cast<char**>(argv.data()), environ);
  posix_spawn_file_actions_destroy(&actions);
  return error == 0 ? pid : 0;
}

// The port a server logging to `log` listens on, once it says (30 s at most; 0 if it does not).
int port_of(const std::string& log) {
  const std::regex listening("listening on 127\\.0\\.0\\.1:([0-9]+)");
  for (int tick = 0; tick < 3000; ++tick) {  // 10 ms each
    std::smatch match;
    const std::string text = read_file(log);
    if (std::regex_search(text, match, listening)) return std::stoi(match[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

// The wait status of `pid` once it exits; killed (and a failure added) after 30 s.
int wait_for_exit(pid_t pid) {
  int status = -1;
  for (int tick = 0; tick < 3000; ++tick) {  // 10 ms each
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ADD_FAILURE() << "recemb serve did not stop within 30 s of SIGTERM";
  return status;
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

// --poll-seconds and --max-examples are bounded; an argument outside its bounds is refused
// before anything starts, naming the flag, the value and the range.
TEST(ServeCommand, PollSecondsAndMaxExamplesAreBounded) {
  std::ostringstream err;
  for (const double seconds : {1e-9, 0.005, -1.0, 86401.0, std::nan("")}) {
    ServeArguments args{.model_dir = "missing", .poll_seconds = seconds};
    EXPECT_THAT(error_of<InvalidArgument>([&] { run_serve_command(args, err); }),
                AllOf(HasSubstr("--poll-seconds "), HasSubstr("must be 0 (never scan again) or "
                                                              "from 0.01 to 86400 (a day)")))
        << seconds;
  }
  for (const int64_t examples : {int64_t{0}, int64_t{1'000'001}, int64_t{100'000'000'000}}) {
    ServeArguments args{.model_dir = "missing", .max_examples = examples};
    EXPECT_EQ(error_of<InvalidArgument>([&] { run_serve_command(args, err); }),
              "--max-examples " + std::to_string(examples) + ": must be from 1 to 1000000");
  }
  EXPECT_THAT(error_of<InvalidArgument>(
                  [&] { run_serve_command({.model_dir = "missing", .poll_seconds = 1e-9}, err); }),
              HasSubstr("--poll-seconds 1e-09"));
  // Within the bounds, the next thing checked is the directory.
  for (const double seconds : {0.0, 0.01, 86400.0}) {
    EXPECT_THAT(error_of<InvalidArgument>([&] {
                  run_serve_command(
                      {.model_dir = "missing", .max_examples = 1'000'000, .poll_seconds = seconds},
                      err);
                }),
                HasSubstr("'missing' is not a directory"));
  }
  EXPECT_EQ(err.str(), "");
}

// --help states the defaults and bounds docs/serving.md gives.
TEST(ServeCommand, HelpStatesTheDefaultsAndBounds) {
  const recemb::test::CommandOutcome outcome =
      recemb::test::run_shell_command("timeout 60 " RECEMB_CLI " serve --help");
  EXPECT_EQ(outcome.status, 0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("0 (or more than the cores): one per core"));
  EXPECT_THAT(outcome.output, HasSubstr("0.01 to 86400, or 0: never"));
  EXPECT_THAT(outcome.output, HasSubstr("1 to 1000000"));
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
  const pid_t pid = spawn_server({(dir / "models").string(), "--listen", "127.0.0.1:0"}, log);
  ASSERT_GT(pid, 0);
  const int port = port_of(log);
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
  const int status = wait_for_exit(pid);
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

// SIGTERM while the poller reads a large model file stops the server within a chunk of the read,
// not after the whole file: here a 2 GiB file (sparse) whose header is valid, moved in as a new
// version while the server runs.
TEST(ServeCommand, SigtermStopsAModelFileBeingRead) {
  recemb::test::TemporaryDirectory dir;
  std::filesystem::create_directories(dir / "models/emb/1");
  const Embedding embedding(
      {{.name = "t", .vocabulary_size = 10, .dim = 2, .combiner = Combiner::kSum}},
      {{.name = "a", .table = "t"}}, {.seed = 4});
  export_serving_model(embedding, dir / "models/emb/1/model.recemb");
  constexpr uint64_t kSize = uint64_t{2} << 30;
  std::filesystem::create_directories(dir / "stage/2");
  {
    const auto header =
        internal::encode_header({.manifest_size = 64, .manifest_checksum = 1, .file_size = kSize});
    std::ofstream(dir / "stage/2/model.recemb", std::ios::binary)
        .write(reinterpret_cast<const char*>(header.data()), header.size());
  }
  std::filesystem::resize_file(dir / "stage/2/model.recemb", kSize);
  const std::string log = (dir / "log").string();
  const pid_t pid = spawn_server(
      {(dir / "models").string(), "--listen", "127.0.0.1:0", "--poll-seconds", "0.05"}, log);
  ASSERT_GT(pid, 0);
  EXPECT_NE(port_of(log), 0) << read_file(log);
  std::filesystem::rename(dir / "stage/2", dir / "models/emb/2");
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the poller is reading it
  const auto start = std::chrono::steady_clock::now();
  kill(pid, SIGTERM);
  const int status = wait_for_exit(pid);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  const std::string text = read_file(log);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << text;
  EXPECT_LT(took.count(), 3.0) << text;
  EXPECT_THAT(text, HasSubstr("recemb serve: stopped"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("refusing model 'emb' version 2"))) << text;
}

}  // namespace
}  // namespace recemb::tools

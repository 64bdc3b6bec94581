// Runs the recemb program itself (RECEMB_CLI, the path CMake passes) as a user would.
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <memory>
#include <span>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"
#include "recemb/serving.h"

#include "format/checksum.h"

namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// `shell` runs before the program in the same shell (for example "ulimit -f 64;").
Result run(const std::string& arguments, const std::string& input = "",
           const std::string& shell = "") {
  // One file per process: ctest runs the tests of this program in parallel processes.
  const auto stdin_path = std::filesystem::path(::testing::TempDir()) /
                          ("cli_stdin_" + std::to_string(getpid()) + ".txt");
  std::ofstream(stdin_path) << input;
  const std::string command =
      shell + std::string(RECEMB_CLI) + " " + arguments + " <" + stdin_path.string() + " 2>&1";
  Result result;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe.get())) > 0) {
    result.output.append(buffer.data(), n);
  }
  const int status = pclose(pipe.release());
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string test_read(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("cli_" + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

const std::string kSmallModel =
    " --set data.table_budget_mib=1 --set data.eval_examples=2048 --set model.embedding_dim=8"
    " --set model.bottom_mlp=[16,8] --set model.top_mlp=[16] --batch-size 256 --threads 2";

TEST(RecembCli, HelpListsTheSubcommands) {
  const Result result = run("--help");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_THAT(result.output, HasSubstr("train"));
  const Result train_help = run("train --help");
  EXPECT_EQ(train_help.exit_code, 0);
  EXPECT_THAT(train_help.output, AllOf(HasSubstr("--resume"), HasSubstr("--set")));
}

TEST(RecembCli, PrintsItsVersion) {
  const Result version = run("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_THAT(version.output, MatchesRegex("recemb [0-9]+\\.[0-9]+\\.[0-9]+\n"));
}

TEST(RecembCli, PrintsDefaultAndEffectiveConfigs) {
  const Result defaults = run("train --print-default-config");
  EXPECT_EQ(defaults.exit_code, 0);
  EXPECT_THAT(defaults.output, HasSubstr("[embedding]"));
  const Result effective =
      run("train --print-config --steps 7 --preset criteo-kaggle --set dense.learning_rate=0.5");
  EXPECT_EQ(effective.exit_code, 0);
  EXPECT_THAT(effective.output, AllOf(HasSubstr("steps = 7"), HasSubstr("criteo-kaggle"),
                                      HasSubstr("learning_rate = 0.5")));
}

TEST(RecembCli, BadSettingsFailWithAClearMessageAndExitCode2) {
  const Result unknown = run("train --set model.depth=3");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.output, HasSubstr("recemb: error: override 'model.depth=3': unknown key"));
  const Result preset = run("train --preset huge --steps 1");
  EXPECT_EQ(preset.exit_code, 2);
  EXPECT_THAT(preset.output, AllOf(HasSubstr("huge"), HasSubstr("criteo-kaggle")));
  EXPECT_EQ(run("train --no-such-flag").exit_code, 109);  // CLI11's code for an unknown option
  const Result missing = run("train --config /nonexistent.toml");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.output, HasSubstr("/nonexistent.toml"));
  // Values that once meant "not given" (adversarial.md TR3f), and a batch beyond every bound.
  EXPECT_EQ(run("train --steps 0").exit_code, 2);
  EXPECT_EQ(run("train --batch-size 0").exit_code, 2);
  EXPECT_EQ(run("train --threads -5").exit_code, 2);
  const Result huge = run("train --set train.batch_size=2147483648");
  EXPECT_EQ(huge.exit_code, 2);
  EXPECT_THAT(huge.output, HasSubstr("train.batch_size must be 1 to 1048576, not 2147483648"));
}

// What a shell leaves of --set embedding.optimizer="adam": a bare word, read as the string.
TEST(RecembCli, ABareWordIsAStringSetting) {
  const Result result = run("train --print-config --set embedding.optimizer=rowwise_adagrad");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output,
              AllOf(HasSubstr("optimizer = 'rowwise_adagrad'"), HasSubstr("learning_rate = 0.1")));
}

// A batch whose buffers exceed what the process may allocate is refused before anything is
// allocated, with the estimate (adversarial.md TR3c, TR3d).
TEST(RecembCli, ABatchBeyondTheMemoryIsRefused) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitized program reserves terabytes of address space: no ulimit -v";
#endif
  const Result result = run("train --batch-size 1000000 --output " + fresh_dir("huge_batch"), "",
                            "ulimit -v 4000000; ");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_THAT(result.output, AllOf(HasSubstr("train.batch_size 1000000 needs about"),
                                   HasSubstr("address-space limit (ulimit -v)")));
}

// Under a file-size limit a checkpoint write fails with EFBIG and the run reports it, instead
// of dying of SIGXFSZ without a word (adversarial.md TR12).
TEST(RecembCli, AFileSizeLimitIsAnErrorNotASignal) {
  const Result result =
      run("train --steps 5 --output " + fresh_dir("file_size") + kSmallModel, "", "ulimit -f 64; ");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_THAT(result.output, AllOf(HasSubstr("recemb: error: "), HasSubstr("File too large")));
}

// Starts `recemb <arguments>` with its output in `output`, sends it `signal` once it wrote
// triggers[0], again once it then wrote triggers[1], and so on, and returns its wait status.
// Bounded: the process is killed after two minutes.
int signal_on_output(const std::string& arguments, const std::filesystem::path& output,
                     const std::vector<std::string>& triggers, int signal) {
  const std::string command =
      "exec " + std::string(RECEMB_CLI) + " " + arguments + " >" + output.string() + " 2>&1";
  std::filesystem::remove(output);  // no trigger from an earlier run
  pid_t pid = 0;
  const char* shell_arguments[] = {"sh", "-c", command.c_str(), nullptr};
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(shell_arguments),
                  environ) != 0) {
    ADD_FAILURE() << "could not start /bin/sh";
    return -1;
  }
  int status = 0;
  size_t sent = 0;
  for (int tick = 0; tick < 6000; ++tick) {  // 20 ms each
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    if (sent < triggers.size() && test_read(output).find(triggers[sent]) != std::string::npos) {
      kill(pid, signal);
      ++sent;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ADD_FAILURE() << "recemb " << arguments << " did not end in two minutes";
  return status;
}

// SIGINT (Ctrl-C) and SIGTERM stop the run after the current step: a checkpoint, the summary,
// exit 130 or 143, and --resume continues from there.
TEST(RecembCli, ASignalStopsTheRunCleanly) {
  for (const auto& [signal, name, code] :
       {std::tuple{SIGINT, "SIGINT", 130}, std::tuple{SIGTERM, "SIGTERM", 143}}) {
    SCOPED_TRACE(name);
    const std::string out = fresh_dir(std::string("signal_") + name);
    const std::string options = " --output " + out + kSmallModel + " --set checkpoint.every=20";
    const auto output = std::filesystem::path(::testing::TempDir()) / "cli_signal_output.txt";
    // Sent once the first checkpoint is written: the run is then well inside its steps.
    const int status = signal_on_output("train --steps 1000000" + options, output,
                                        {"checkpoint " + out + "/checkpoints/ckpt-"}, signal);
    ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), code);
    const std::string text = test_read(output);
    const size_t at = text.find(std::string("stopped by ") + name + " after step ");
    ASSERT_NE(at, std::string::npos) << text;
    const int64_t step =
        std::stoll(text.substr(at + std::string("stopped by ").size() + std::strlen(name) +
                               std::string(" after step ").size()));
    EXPECT_GE(step, 20);
    EXPECT_THAT(text, AllOf(HasSubstr("stopping after the current step"), HasSubstr("held-out AUC"),
                            HasSubstr("continue with --resume")));
    EXPECT_THAT(test_read(out + "/summary.json"),
                HasSubstr("\"stop_signal\": " + std::to_string(signal) + ","));
    const auto latest = recemb::latest_checkpoint(out + "/checkpoints");
    ASSERT_TRUE(latest.has_value());
    EXPECT_EQ(recemb::inspect_checkpoint(*latest).step, step);

    const std::string until = std::to_string(step + 10);
    const Result resumed = run("train --resume --steps " + until + options);
    EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_THAT(resumed.output, AllOf(HasSubstr("resumed from " + latest->string()),
                                      HasSubstr("steps " + std::to_string(step) + ".." + until)));
  }
}

// CLI11's PositiveNumber said "Value 0 not in range 0.000000 to 1797...(309 digits)", and no
// bound let --shards 1000000000 grow memory until the process was killed.
TEST(RecembCli, PlanShardsOutsideTheBoundSayTheRange) {
  for (const std::string shards : {"0", "-3", "65537", "1000000000"}) {
    const Result result = run("plan --shards=" + shards);
    EXPECT_NE(result.exit_code, 0) << shards;
    EXPECT_THAT(result.output, HasSubstr("--shards: Value " + shards + " not in range 1 to 65536"));
  }
  EXPECT_EQ(run("plan --shards 3").exit_code, 0);
}

TEST(RecembCli, TrainRunsAndResumes) {
  const std::string out = fresh_dir("train");
  const Result first = run("train --steps 30 --output " + out + kSmallModel);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_THAT(first.output, AllOf(HasSubstr("held-out AUC"), HasSubstr("examples/s"),
                                  HasSubstr("steps 0..30"), HasSubstr("training.svg")));
  EXPECT_TRUE(std::filesystem::exists(out + "/training.svg"));
  const Result resumed = run("train --resume --steps 40 --output " + out + kSmallModel);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output, AllOf(HasSubstr("resumed from"), HasSubstr("steps 30..40")));
  EXPECT_THAT(resumed.output, Not(HasSubstr("error")));
}

// Day after day: a new run from another run's checkpoints, on other data, counting its own steps;
// --resume and --init-from together are refused; a model of another shape is exit status 2.
TEST(RecembCli, TrainInitialisesANewRunFromACheckpoint) {
  const std::string day1 = fresh_dir("init_day1"), day2 = fresh_dir("init_day2");
  ASSERT_EQ(run("train --steps 10 --output " + day1 + kSmallModel).exit_code, 0);
  const Result next = run("train --init-from " + day1 + "/checkpoints --steps 5 --output " + day2 +
                          " --set data.synthetic_seed=3" + kSmallModel);
  ASSERT_EQ(next.exit_code, 0) << next.output;
  EXPECT_THAT(next.output, AllOf(HasSubstr("initialised from " + day1 +
                                           "/checkpoints/ckpt-000000000010 (step 10 of its run)"),
                                 HasSubstr("steps 0..5")));
  const Result both = run("train --resume --init-from " + day1 + "/checkpoints" + kSmallModel);
  EXPECT_NE(both.exit_code, 0);
  EXPECT_THAT(both.output, HasSubstr("--resume excludes --init-from"));
  const Result other = run("train --init-from " + day1 + "/checkpoints --output " +
                           fresh_dir("init_other") + kSmallModel + " --set model.top_mlp=[8]");
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_THAT(other.output, HasSubstr("dense/top_mlp is [8], was [16]"));
  const Result word = run("train --set embedding.learning_rate=fast");
  EXPECT_EQ(word.exit_code, 2);
  EXPECT_THAT(word.output, HasSubstr("embedding.learning_rate: expected a number, got 'fast'"));
}

// A run exported as a model directory serves `recemb predict`: one answer line per input line.
TEST(RecembCli, ExportedRunsPredictCriteoLines) {
  const std::string out = fresh_dir("predict");
  ASSERT_EQ(run("train --steps 5 --output " + out + kSmallModel).exit_code, 0);
  const Result exported = run("export " + out + "/checkpoints " + out + "/model");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_THAT(exported.output, HasSubstr("and the dense model"));
  std::string line = "1";
  for (int j = 0; j < 13; ++j) line += "\t" + std::to_string(j * 7);
  for (int f = 0; f < 26; ++f) line += "\t68fd1e" + std::to_string(10 + f);
  const Result predicted = run("predict " + out + "/model", line + "\nnot criteo\n" + line + "\n");
  EXPECT_EQ(predicted.exit_code, 1);
  std::istringstream lines(predicted.output);
  std::string first, second, third;
  std::getline(lines, first);
  std::getline(lines, second);
  std::getline(lines, third);
  EXPECT_GT(std::stof(first), 0.0f);
  EXPECT_LT(std::stof(first), 1.0f);
  EXPECT_THAT(second, HasSubstr("{\"error\": {\"line\": 2, \"code\": \"InvalidArgument\", "
                                "\"message\": \"line 2: "));
  EXPECT_EQ(third, first);
}

// Hostile input ends neither `recemb lookup` (which answers the lines after it) nor
// `recemb checkpoint inspect` in a crash: a number beyond double's range, and values nested
// 100,000 arrays deep in a request line and in a checkpoint's manifest.
TEST(RecembCli, HostileJsonIsAnErrorNotACrash) {
  const std::string dir = fresh_dir("hostile_json");
  std::filesystem::create_directories(dir);
  recemb::Embedding embedding({{.name = "t", .vocabulary_size = 10, .dim = 2}},
                              {{.name = "a", .table = "t"}}, {.optimizer = recemb::Sgd{}});
  const std::string model = dir + "/model.recemb";
  recemb::export_serving_model(embedding, model);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const Result lookup =
      run("lookup " + model, "{\"a\": [1e400]}\n{\"a\": " + deep + "}\n{\"a\": [3]}\n");
  EXPECT_EQ(lookup.exit_code, 1) << lookup.output;
  EXPECT_THAT(lookup.output, AllOf(HasSubstr("line 1: not valid JSON"),
                                   HasSubstr("line 2: feature 'a': id [...] is not an integer"),
                                   HasSubstr("{\"a\": [")));

  const std::filesystem::path checkpoint = recemb::save_checkpoint(embedding, dir + "/checkpoints");
  std::string manifest;
  std::getline(std::ifstream(checkpoint / "manifest.json"), manifest, '\0');
  manifest.insert(manifest.rfind('}'), ", \"deep\": " + deep);
  std::ofstream(checkpoint / "manifest.json", std::ios::trunc) << manifest;
  std::ofstream(checkpoint / "manifest.xxh3", std::ios::trunc)
      << recemb::format::checksum_to_hex(
             recemb::format::checksum(std::as_bytes(std::span(manifest))))
      << "\n";
  const Result inspect = run("checkpoint inspect " + checkpoint.string());
  EXPECT_GT(inspect.exit_code, 0) << inspect.output;  // an exit with an error, not a signal
  EXPECT_THAT(inspect.output, HasSubstr("manifest.json: arrays and objects nest deeper than"));
}

// A second Ctrl-C ends the process at once, by the signal, while the first one's final
// evaluation runs (a held-out set of 100,000 examples: tenths of a second, the poll is 20 ms).
TEST(RecembCli, ASecondSignalEndsTheRunAtOnce) {
  const std::string out = fresh_dir("signal_twice");
  const auto output = std::filesystem::path(::testing::TempDir()) / "cli_signal_twice.txt";
  const int status = signal_on_output(
      "train --steps 1000000 --output " + out + kSmallModel +
          " --set checkpoint.every=20 --set data.eval_examples=100000",
      output, {"checkpoint " + out + "/checkpoints/ckpt-", "stopping at step "}, SIGINT);
  ASSERT_TRUE(WIFSIGNALED(status)) << test_read(output);
  EXPECT_EQ(WTERMSIG(status), SIGINT);
  EXPECT_THAT(test_read(output), Not(HasSubstr("stopped by SIGINT")));
}

}  // namespace

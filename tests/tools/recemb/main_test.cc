// Runs the recemb program itself (RECEMB_CLI, the path CMake passes) as a user would.
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"
#include "recemb/serving.h"

#include "format/checksum.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Result run(const std::string& arguments, const std::string& input = "") {
  const auto dir = std::filesystem::path(::testing::TempDir());
  const auto stdin_path = dir / "cli_stdin.txt";
  std::ofstream(stdin_path) << input;
  const std::string command =
      std::string(RECEMB_CLI) + " " + arguments + " <" + stdin_path.string() + " 2>&1";
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
  EXPECT_THAT(lookup.output, AllOf(HasSubstr("line 1: not JSON"), HasSubstr("line 2: arrays"),
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

}  // namespace

#include "tools/recemb/predict_command.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"
#include "recemb/error.h"

#include "dlrm/batch_buffers.h"
#include "dlrm/criteo_reader.h"
#include "dlrm/dlrm_dense_model.h"
#include "dlrm/example_batch.h"
#include "dlrm/model_file.h"
#include "testing/criteo_lines.h"
#include "testing/gzip_text.h"
#include "testing/temporary_directory.h"
#include "tools/recemb/checkpoint_commands.h"
#include "train/config/train_config.h"
#include "train/report/metrics.h"
#include "train/run/trainer.h"

namespace recemb::tools {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBatchSize = 32;
constexpr int kHeldOutLines = 200;

// `recemb predict` and the trainer's forward pass compute the same float32 operations on the same
// values (a float32 export gives the Embedding's activations bitwise), except that the dense
// layers' products see other batches (the trainer's of train.batch_size, predict's of a whole
// file or of one stdin line), which Eigen sums in another order. That changes a probability by a
// few float32 roundings of the logit's larger terms times the sigmoid's slope (<= 1/4): within
// 5e-6 (observed: under 1e-6).
constexpr double kTolerance = 5e-6;

// A run of `recemb train` on random Criteo lines (embedding.vocabulary `vocabulary_`), its
// held-out file, and its model exported.
class PredictCommandTest : public ::testing::Test {
 protected:
  explicit PredictCommandTest(std::string vocabulary = "hashed")
      : vocabulary_(std::move(vocabulary)) {}

  void SetUp() override {
    std::mt19937_64 random(23);
    std::ofstream(dir_ / "train.tsv") << test::random_criteo_text(random, 640);
    std::ofstream(dir_ / "held_out.tsv") << test::random_criteo_text(random, kHeldOutLines);
    config_ = train::load_train_config(
        "",
        {"data.path=\"" + (dir_ / "train.tsv").string() + "\"",
         "data.eval_path=\"" + (dir_ / "held_out.tsv").string() + "\"",
         "data.eval_examples=" + std::to_string(kHeldOutLines), "data.table_budget_mib=1",
         "model.embedding_dim=4", "model.bottom_mlp=[8, 4]", "model.top_mlp=[8]", "train.steps=12",
         "train.batch_size=" + std::to_string(kBatchSize), "train.eval_every=0",
         "embedding.threads=1", "embedding.vocabulary=\"" + vocabulary_ + "\"",
         "output.dir=\"" + (dir_ / "run").string() + "\""});
    std::ostringstream log;
    summary_ = train::run_training(config_, {.log = &log});
    std::ostringstream out;
    ASSERT_EQ(run_export_command({.checkpoint = (dir_ / "run" / "checkpoints").string(),
                                  .output = model_dir().string()},
                                 out),
              0);
    EXPECT_THAT(out.str(), HasSubstr("and the dense model ("));
  }

  std::filesystem::path model_dir() const { return dir_ / "model"; }

  // The held-out probabilities as the trainer's evaluation computes them, from the checkpoint:
  // CriteoReader, Embedding::lookup and DlrmDenseModel::predict on batches of train.batch_size.
  std::vector<float> trainer_probabilities() {
    const std::filesystem::path checkpoint = dir_ / "run" / "checkpoints";
    Embedding embedding = load_checkpoint(checkpoint, {.tables_only = true, .num_threads = 1});
    const RestoredState state = restore_checkpoint(embedding, checkpoint);
    dlrm::DlrmDenseModel model({.embedding_dim = config_.model.embedding_dim,
                                .bottom_mlp = config_.model.bottom_mlp,
                                .top_mlp = config_.model.top_mlp});
    const std::vector<float>& parameters = state.extra_arrays.at(dlrm::kDenseParametersArray);
    std::copy(parameters.begin(), parameters.end(), model.parameters().begin());
    dlrm::ReaderOptions options{.ids = dlrm::CategoricalIds::kRawKeys};
    if (vocabulary_ == "hashed") {
      options = {};
      for (const TableConfig& table : embedding.tables()) {
        options.vocabulary_sizes.push_back(table.vocabulary_size);
      }
    }
    dlrm::CriteoReader reader({(dir_ / "held_out.tsv").string()}, options);
    dlrm::ExampleBatch batch;
    dlrm::BatchBuffers buffers(config_.model.embedding_dim);
    std::vector<float> probabilities;
    while (reader.next(batch, kBatchSize) > 0) {
      buffers.bind(batch, 0, batch.size);
      embedding.lookup(buffers.inputs(), buffers.activations());
      std::vector<float> batch_probabilities(static_cast<size_t>(batch.size));
      model.predict(batch.dense, buffers.activation_views(), batch_probabilities);
      probabilities.insert(probabilities.end(), batch_probabilities.begin(),
                           batch_probabilities.end());
      held_out_labels_.insert(held_out_labels_.end(), batch.labels.begin(), batch.labels.end());
    }
    return probabilities;
  }

  // The trainer's held-out probabilities, predicted by recemb predict from the file and from stdin.
  void expect_the_trainers_probabilities();

  const std::string vocabulary_;
  const test::TemporaryDirectory dir_;
  train::TrainConfig config_;
  train::TrainSummary summary_;
  std::vector<float> held_out_labels_;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<float> probabilities_of(const std::string& text) {
  std::vector<float> probabilities;
  for (const std::string& line : lines_of(text)) probabilities.push_back(std::stof(line));
  return probabilities;
}

// The same run with dynamic tables: their keys are the lines' values, unseen ones read zero rows.
class PredictDynamicCommandTest : public PredictCommandTest {
 protected:
  PredictDynamicCommandTest() : PredictCommandTest("dynamic") {}
};

void PredictCommandTest::expect_the_trainers_probabilities() {
  const std::vector<float> expected = trainer_probabilities();
  ASSERT_EQ(expected.size(), static_cast<size_t>(kHeldOutLines));
  // The trainer's own final evaluation saw these probabilities.
  EXPECT_NEAR(train::roc_auc(expected, held_out_labels_), summary_.final_auc, 1e-12);

  std::ostringstream from_file, err;
  std::istringstream no_input;
  EXPECT_EQ(run_predict_command(
                {.model = model_dir().string(), .data = {(dir_ / "held_out.tsv").string()}},
                no_input, from_file, err),
            0);
  EXPECT_EQ(err.str(), "");
  std::ifstream held_out(dir_ / "held_out.tsv");
  std::istringstream in(std::string(std::istreambuf_iterator<char>(held_out), {}));
  std::ostringstream from_stdin;  // the model file itself may be given for its directory
  EXPECT_EQ(
      run_predict_command({.model = (model_dir() / "model.recemb").string()}, in, from_stdin, err),
      0);

  for (const std::string& text : {from_file.str(), from_stdin.str()}) {
    const std::vector<float> predicted = probabilities_of(text);
    ASSERT_EQ(predicted.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(predicted[i], expected[i], kTolerance) << "line " << i + 1;
    }
    EXPECT_NEAR(train::roc_auc(predicted, held_out_labels_), summary_.final_auc, 1e-3);
  }
  // Not a constant model.
  EXPECT_GT(*std::max_element(expected.begin(), expected.end()) -
                *std::min_element(expected.begin(), expected.end()),
            1e-3f);
}

TEST_F(PredictCommandTest, PredictsTheTrainersProbabilitiesFromFilesAndStdin) {
  expect_the_trainers_probabilities();
}

TEST_F(PredictDynamicCommandTest, PredictsTheTrainersProbabilitiesFromFilesAndStdin) {
  expect_the_trainers_probabilities();
}

// Every line gets one answer line, in order: a bad line an error object in its place, and the
// exit status is 1. A line of 39 fields is refused as ambiguous unless --labels says which it is.
TEST_F(PredictCommandTest, EveryLineGetsOneAnswerLine) {
  std::mt19937_64 random(4);
  const std::string good = test::random_criteo_line(random);
  const std::string unlabelled = test::random_criteo_line(random, false);
  std::istringstream in(good + "\nnot a criteo line \"quoted\"\n" + unlabelled + "\r\n\n" + good);
  std::ostringstream out, err;
  EXPECT_EQ(run_predict_command({.model = model_dir().string()}, in, out, err), 1);
  const std::vector<std::string> answers = lines_of(out.str());
  ASSERT_EQ(answers.size(), 5u);
  EXPECT_EQ(answers[4], answers[0]);
  EXPECT_GT(std::stof(answers[0]), 0.0f);
  EXPECT_EQ(answers[1],
            "{\"error\": {\"line\": 2, \"code\": \"InvalidArgument\", \"message\": \"line 2: "
            "expected 40 tab-separated fields, found 1\"}}");
  EXPECT_THAT(answers[2], HasSubstr("line 3: 39 tab-separated fields: a line without its label"));
  EXPECT_EQ(answers[3],
            "{\"error\": {\"line\": 4, \"code\": \"InvalidArgument\", \"message\": \"line 4: "
            "empty line\"}}");
  EXPECT_THAT(err.str(), HasSubstr("3 of 5 lines could not be predicted"));

  // --labels no: the unlabelled line is predicted, as its labelled form is by its field count.
  std::istringstream without(unlabelled + "\n"), with("0\t" + unlabelled + "\n");
  std::ostringstream without_out, with_out;
  EXPECT_EQ(
      run_predict_command({.model = model_dir().string(), .labels = dlrm::CriteoLabel::kAbsent},
                          without, without_out, err),
      0);
  EXPECT_EQ(run_predict_command({.model = model_dir().string()}, with, with_out, err), 0);
  EXPECT_EQ(without_out.str(), with_out.str());

  // Files: the message names the file and line.
  std::ofstream(dir_ / "bad.tsv") << good << "\n1\t2\n";
  std::ostringstream file_out;
  EXPECT_EQ(
      run_predict_command({.model = model_dir().string(), .data = {(dir_ / "bad.tsv").string()}},
                          in, file_out, err),
      1);
  EXPECT_THAT(file_out.str(), HasSubstr((dir_ / "bad.tsv").string() + ":2: expected 40"));
}

// A labelled line whose empty last field lost its tab (39 fields) is never read as one without
// its label (every field shifted): refused by default, read as the trainer reads it with
// --labels yes (the same probability as the line with its tab), refused with --labels no only if
// it is no valid unlabelled line.
TEST_F(PredictCommandTest, ALabelledLineThatLostItsLastTabIsNotReadAsUnlabelled) {
  std::mt19937_64 random(6);
  std::string complete = test::random_criteo_line(random);
  complete = complete.substr(0, complete.rfind('\t') + 1);  // C26 empty: the line ends in a tab
  const std::string trimmed = complete.substr(0, complete.size() - 1);
  std::ostringstream out, err;
  std::istringstream in(trimmed + "\n");
  EXPECT_EQ(run_predict_command({.model = model_dir().string()}, in, out, err), 1);
  EXPECT_THAT(out.str(), HasSubstr("39 tab-separated fields"));
  EXPECT_THAT(out.str(), HasSubstr("--labels no or --labels yes"));
  std::istringstream trimmed_in(trimmed + "\n"), complete_in(complete + "\n");
  std::ostringstream trimmed_out, complete_out;
  EXPECT_EQ(
      run_predict_command({.model = model_dir().string(), .labels = dlrm::CriteoLabel::kPresent},
                          trimmed_in, trimmed_out, err),
      0);
  EXPECT_EQ(run_predict_command({.model = model_dir().string()}, complete_in, complete_out, err),
            0);
  EXPECT_EQ(trimmed_out.str(), complete_out.str());
}

// --data reads gzip files as the trainer does (CriteoReader): the same answers as the plain
// file; damaged gzip data stops the command with DataLoss naming the file; gzip on stdin is
// refused, not answered line by line as text.
TEST_F(PredictCommandTest, GzipDataIsReadAsTheTrainerReadsIt) {
  std::ifstream held_out(dir_ / "held_out.tsv");
  const std::string text(std::istreambuf_iterator<char>(held_out), {});
  const std::string gzip = test::gzip_member(text);
  std::ofstream(dir_ / "held_out.gz", std::ios::binary) << gzip;
  std::ofstream(dir_ / "damaged.gz", std::ios::binary) << gzip << "trailing garbage";
  std::istringstream no_input;
  std::ostringstream plain_out, gzip_out, err;
  EXPECT_EQ(run_predict_command(
                {.model = model_dir().string(), .data = {(dir_ / "held_out.tsv").string()}},
                no_input, plain_out, err),
            0);
  EXPECT_EQ(run_predict_command(
                {.model = model_dir().string(), .data = {(dir_ / "held_out.gz").string()}},
                no_input, gzip_out, err),
            0);
  EXPECT_EQ(gzip_out.str(), plain_out.str());
  std::ostringstream damaged_out;
  try {
    run_predict_command({.model = model_dir().string(), .data = {(dir_ / "damaged.gz").string()}},
                        no_input, damaged_out, err);
    ADD_FAILURE() << "no error";
  } catch (const DataLoss& error) {
    EXPECT_THAT(error.what(), HasSubstr((dir_ / "damaged.gz").string()));
  }
  std::istringstream gzip_in(gzip);
  std::ostringstream stdin_out;
  EXPECT_THROW(run_predict_command({.model = model_dir().string()}, gzip_in, stdin_out, err),
               InvalidArgument);
  EXPECT_EQ(stdin_out.str(), "");
}

TEST_F(PredictCommandTest, UnusableModelsAndDataThrowBeforeAnyOutput) {
  std::istringstream in;
  std::ostringstream out, err;
  EXPECT_THROW(run_predict_command({.model = (dir_ / "none").string()}, in, out, err),
               std::system_error);
  EXPECT_THROW(
      run_predict_command(
          {.model = model_dir().string(), .data = {(dir_ / "missing.tsv").string()}}, in, out, err),
      std::system_error);
  EXPECT_THROW(run_predict_command({.model = model_dir().string(), .data = {dir_.path().string()}},
                                   in, out, err),
               InvalidArgument);
  // The file ends with the dense model's last array (the logit layer's bias, padded to 64
  // bytes): a damaged byte there is found.
  const std::filesystem::path file_path = model_dir() / dlrm::kModelFileName;
  const auto size = static_cast<std::streamoff>(std::filesystem::file_size(file_path));
  {
    std::fstream file(file_path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(size - 64);
    file.put('\x55');
  }
  try {
    run_predict_command({.model = model_dir().string()}, in, out, err);
    ADD_FAILURE() << "predicted";
  } catch (const DataLoss& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("model.recemb"),
                                    HasSubstr("extra array 'dense/top_mlp/layer_1/bias'"),
                                    HasSubstr("checksum does not match")));
  }
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace recemb::tools

// The runs the trainer's tests make (trainer_test.cc, trainer_ranks_test.cc,
// step_pipeline_test.cc): a small configuration that trains in seconds, a fresh output directory
// per test, Criteo files to train on, and a log that stops a run.
#ifndef RECEMB_TESTS_TRAIN_RUN_TRAINER_RUNS_H_
#define RECEMB_TESTS_TRAIN_RUN_TRAINER_RUNS_H_

#include <atomic>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <ios>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "train/config/train_config.h"

namespace recemb::train::trainer_runs {

// An empty directory (removed if it exists) under the tests' temporary directory, for `name`
// (unique among the trainer's tests).
inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("trainer_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

// A small model on small tables: trains in a few seconds even under the sanitizers.
inline TrainConfig small_config(const std::filesystem::path& dir,
                                std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {
      "data.table_budget_mib=1",  "data.eval_examples=4096",
      "model.embedding_dim=8",    "model.bottom_mlp=[16,8]",
      "model.top_mlp=[16]",       "train.batch_size=256",
      "train.steps=120",          "train.eval_every=40",
      "train.log_every=10",       "checkpoint.every=50",
      "embedding.threads=2",      "embedding.learning_rate=1.0",
      "dense.learning_rate=0.01", "output.dir=\"" + dir.string() + "\""};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return load_train_config("", overrides);
}

// Writes `lines` Criteo lines to `path`: label, 13 integers, 26 hex values; some fields empty; one
// line in 97 (up to `malformed` of them) malformed. The label is carried by I1 and C1.
inline void write_criteo(const std::filesystem::path& path, int lines, int malformed,
                         uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) {
    if (i % 97 == 5 && malformed-- > 0) {
      out << "1\tnot-a-number\n";
      continue;
    }
    const uint64_t hot = rng() % 8;
    out << (hot < 3 ? 1 : 0);
    for (int f = 0; f < 13; ++f) {
      out << '\t';
      if (f == 0) {
        out << hot * 10;  // I1 and C1 carry the label
      } else if (rng() % 10 != 0) {
        out << rng() % 100;
      }
    }
    for (int f = 0; f < 26; ++f) {
      out << '\t';
      if (rng() % 10 != 0) out << std::hex << (f == 0 ? hot : rng() % 5000) << std::dec;
    }
    out << '\n';
  }
}

// A log that sets `flag` to SIGINT once `trigger` was written to it and flushed: a user pressing
// Ctrl-C on seeing that line.
class InterruptOnText : public std::stringbuf {
 public:
  InterruptOnText(std::string trigger, std::atomic<int>& flag)
      : trigger_(std::move(trigger)), flag_(flag) {}

 protected:
  int sync() override {
    if (str().find(trigger_) != std::string::npos) flag_.store(SIGINT);
    return 0;
  }

 private:
  std::string trigger_;
  std::atomic<int>& flag_;
};

}  // namespace recemb::train::trainer_runs

#endif  // RECEMB_TESTS_TRAIN_RUN_TRAINER_RUNS_H_

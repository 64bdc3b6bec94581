#include "train/config/resume_settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <string>
#include <utility>
#include <vector>

#include "recemb/error.h"

#include "testing/error_of.h"
#include "train/config/train_config.h"

namespace recemb::train {
namespace {

using test::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ResumeSettings, ResumeRefusesSettingsThatChangeTheUpdates) {
  const std::string saved = to_toml(load_train_config("", {"train.batch_size=128"}));
  const auto error = [&](const std::vector<std::string>& overrides) {
    return error_of<InvalidArgument>([&] {
      check_resume_settings(saved, load_train_config("", overrides), "run/checkpoints/ckpt-7");
    });
  };
  EXPECT_THAT(error({"train.batch_size=64"}), AllOf(HasSubstr("train.batch_size is 64, was 128"),
                                                    HasSubstr("run/checkpoints/ckpt-7")));
  // Other data or settings: the hint names --init-from, which starts a new run from it.
  EXPECT_THAT(error({"train.batch_size=128", "data.path=\"day2.tsv\""}),
              AllOf(HasSubstr("data.path is 'day2.tsv', was ''"),
                    HasSubstr("--init-from run/checkpoints/ckpt-7")));
  EXPECT_THAT(error({"train.batch_size=128", "data.synthetic_seed=2"}),
              HasSubstr("data.synthetic_seed is 2, was 1"));
  EXPECT_THAT(error({"train.batch_size=128", "tables.C3.vocabulary_size=10"}),
              HasSubstr("tables.C3.vocabulary_size is 10, was (not set)"));
  EXPECT_THAT(error({"train.batch_size=128", "embedding.optimizer=adam"}),
              AllOf(HasSubstr("embedding.learning_rate is 0.01, was 1.0; "),
                    HasSubstr("embedding.optimizer is 'adam', was 'adagrad'")));
  for (const auto& [setting, message] : std::vector<std::pair<std::string, std::string>>{
           {"embedding.vocabulary=dynamic", "embedding.vocabulary is 'dynamic', was 'hashed'"},
           {"embedding.capacity=9", "embedding.capacity is 9, was 0"},
           {"embedding.min_count=2", "embedding.min_count is 2, was 1"},
           {"embedding.ttl_steps=5", "embedding.ttl_steps is 5, was 0"},
           {"embedding.when_full=error",
            "embedding.when_full is 'error', was 'evict_least_recent'"}}) {
    EXPECT_THAT(error({"train.batch_size=128", setting}), HasSubstr(message)) << setting;
  }
  // Settings written before the vocabulary settings existed had their defaults.
  std::string older = saved;
  for (const std::string key : {"vocabulary", "capacity", "min_count", "ttl_steps", "when_full",
                                "synthetic_item_lifetime"}) {
    const size_t line = older.find("\n" + key + " = ");
    ASSERT_NE(line, std::string::npos) << key;
    older.erase(line, older.find('\n', line + 1) - line);
  }
  EXPECT_NO_THROW(
      check_resume_settings(older, load_train_config("", {"train.batch_size=128"}), "old-ckpt"));
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                check_resume_settings(
                    older,
                    load_train_config("", {"train.batch_size=128", "embedding.vocabulary=dynamic"}),
                    "old-ckpt");
              }),
              HasSubstr("embedding.vocabulary is 'dynamic', was 'hashed'"));
  // What may change: the length of the run, its records, where they go, how the work is spread.
  EXPECT_NO_THROW(check_resume_settings(
      saved,
      load_train_config(
          "", {"train.batch_size=128", "train.steps=9000", "train.eval_every=3",
               "train.log_every=7", "checkpoint.every=11", "checkpoint.keep=5",
               "checkpoint.dir=elsewhere", "output.dir=other", "embedding.threads=3",
               "embedding.sharding=row_wise", "data.max_malformed=0", "train.overlap=false"}),
      "ckpt"));
}

TEST(ResumeSettings, DataSettingsAddedSinceHadTheirDefaultsAndTheReaderThreadsMayChange) {
  const TrainConfig one = load_train_config("", {"data.path=\"day_0.gz\""});
  const TrainConfig several =
      load_train_config("", {"data.path=[\"day_0.gz\", \"day_*.gz\"]", "train.epochs=3",
                             "data.eval_fraction=0.05", "data.strict=true"});
  // An old checkpoint's settings (no epochs, eval_fraction, strict) resume a run of defaults.
  EXPECT_NO_THROW(check_resume_settings("[data]\npath = 'day_0.gz'\n", one, "ckpt"));
  EXPECT_THAT(
      error_of<InvalidArgument>([&] { check_resume_settings(to_toml(one), several, "ckpt"); }),
      AllOf(HasSubstr("train.epochs is 3, was 1"), HasSubstr("data.strict is true, was false")));
  // The reader's threads do not change what it reads.
  EXPECT_NO_THROW(check_resume_settings(
      to_toml(one), load_train_config("", {"data.path=\"day_0.gz\"", "data.reader_threads=2"}),
      "ckpt"));
}

}  // namespace
}  // namespace recemb::train

#include "train/data/prefetching_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdexcept>

#include "recemb/error.h"

#include "dlrm/criteo_profile.h"
#include "train/data/synthetic_criteo.h"

namespace recemb::train {
namespace {

using ::testing::HasSubstr;

SyntheticOptions options(std::optional<int64_t> num_examples) {
  return {.seed = 9,
          .vocabulary_sizes = dlrm::fit_to_budget(dlrm::kCriteoKaggleCardinalities,
                                                  {.dim = 4, .max_bytes = 1 << 20}),
          .num_examples = num_examples};
}

void expect_same(const dlrm::ExampleBatch& a, const dlrm::ExampleBatch& b) {
  ASSERT_EQ(a.size, b.size);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.dense, b.dense);
  EXPECT_EQ(a.categorical, b.categorical);
}

TEST(PrefetchingSource, GivesTheWrappedSourcesBatchesAndPositions) {
  SyntheticCriteo direct(options(1000));
  SyntheticCriteo wrapped(options(1000));
  PrefetchingSource prefetching(wrapped, 96);
  dlrm::ExampleBatch expected, got;
  EXPECT_EQ(prefetching.position(), direct.position());
  for (int i = 0; i < 12; ++i) {  // 10 full batches, a short one (40), then exhausted
    const int64_t count = direct.next(expected, 96);
    EXPECT_EQ(prefetching.next(got, 96), count) << i;
    expect_same(got, expected);
    EXPECT_EQ(prefetching.position(), direct.position()) << i;
  }
  EXPECT_EQ(got.size, 0);
}

TEST(PrefetchingSource, SeekDropsTheBatchReadAhead) {
  SyntheticCriteo direct(options(std::nullopt));
  SyntheticCriteo wrapped(options(std::nullopt));
  PrefetchingSource prefetching(wrapped, 64);
  dlrm::ExampleBatch expected, got;
  prefetching.next(got, 64);
  prefetching.next(got, 64);
  const std::string after_two = prefetching.position();
  prefetching.next(got, 64);  // and the fourth is being read ahead
  prefetching.seek(after_two);
  EXPECT_EQ(prefetching.position(), after_two);
  direct.seek(after_two);
  for (int i = 0; i < 3; ++i) {
    direct.next(expected, 64);
    prefetching.next(got, 64);
    expect_same(got, expected);
  }
  EXPECT_THROW(prefetching.seek("synthetic:x"), InvalidArgument);
  direct.next(expected, 64);
  prefetching.next(got, 64);  // a failed seek changed nothing
  expect_same(got, expected);
  prefetching.pause();
  EXPECT_EQ(wrapped.position(), "synthetic:" + std::to_string(64 * 7));  // one read ahead
}

// Fails on its third batch, once.
class FailingSource final : public dlrm::ExampleSource {
 public:
  int64_t next(dlrm::ExampleBatch& batch, int64_t max_examples) override {
    if (++calls_ == 3) throw InvalidArgument("too many malformed lines");
    dlrm::begin_batch(batch, max_examples);
    dlrm::finish_batch(batch, max_examples, max_examples);
    ++served_;
    return max_examples;
  }
  std::string position() const override { return std::to_string(served_); }
  void seek(std::string_view) override {}

 private:
  int calls_ = 0;
  int served_ = 0;
};

TEST(PrefetchingSource, ErrorsReachTheCallOfTheirBatch) {
  FailingSource failing;
  PrefetchingSource prefetching(failing, 8);
  dlrm::ExampleBatch batch;
  EXPECT_EQ(prefetching.next(batch, 8), 8);
  EXPECT_EQ(prefetching.next(batch, 8), 8);
  EXPECT_EQ(prefetching.position(), "2");
  try {
    prefetching.next(batch, 8);
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("too many malformed lines"));
  }
  EXPECT_EQ(prefetching.position(), "2");
  EXPECT_EQ(prefetching.next(batch, 8), 8);  // the source recovered: the next call reads again
  EXPECT_EQ(prefetching.position(), "3");
  EXPECT_THAT(
      [&] {
        try {
          prefetching.next(batch, 7);
        } catch (const InvalidArgument& error) {
          return std::string(error.what());
        }
        return std::string();
      }(),
      HasSubstr("the batch size is 8"));
  EXPECT_THROW(PrefetchingSource(failing, 0), InvalidArgument);
}

}  // namespace
}  // namespace recemb::train

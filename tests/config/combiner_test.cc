#include "recemb/combiner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "recemb/error.h"

namespace recemb {
namespace {

TEST(CombinerTest, NamesRoundTrip) {
  for (const Combiner c : {Combiner::kSum, Combiner::kMean, Combiner::kSqrtn}) {
    EXPECT_EQ(parse_combiner(combiner_name(c)), c);
  }
  EXPECT_EQ(combiner_name(Combiner::kSqrtn), "sqrtn");
}

TEST(CombinerTest, UnknownNameListsValidOnes) {
  try {
    parse_combiner("max");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("'max'"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("'sum', 'mean', 'sqrtn'"));
  }
}

}  // namespace
}  // namespace recemb

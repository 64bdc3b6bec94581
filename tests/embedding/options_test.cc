// The names of EmbeddingOptions' enums (recemb/embedding.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "recemb/embedding.h"
#include "recemb/error.h"

#include "testing/error_of.h"

namespace recemb {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(EmbeddingOptionNames, NonFiniteGradientsRoundTrip) {
  for (const NonFiniteGradients value :
       {NonFiniteGradients::kReject, NonFiniteGradients::kSkipRows}) {
    EXPECT_EQ(parse_non_finite_gradients(non_finite_gradients_name(value)), value);
  }
  EXPECT_EQ(non_finite_gradients_name(NonFiniteGradients::kSkipRows), "skip_rows");
  EXPECT_THAT(test::error_of<InvalidArgument>([] { parse_non_finite_gradients("skip"); }),
              AllOf(HasSubstr("unknown non_finite_gradients 'skip'"),
                    HasSubstr("valid names are 'reject', 'skip_rows'")));
  EXPECT_THAT(test::error_of<InvalidArgument>(
                  [] { non_finite_gradients_name(static_cast<NonFiniteGradients>(7)); }),
              HasSubstr("NonFiniteGradients value 7"));
}

TEST(EmbeddingOptionNames, PipelineStalenessRoundTrip) {
  for (const PipelineStaleness value : {PipelineStaleness::kNone, PipelineStaleness::kOneStep}) {
    EXPECT_EQ(parse_pipeline_staleness(pipeline_staleness_name(value)), value);
  }
  EXPECT_EQ(pipeline_staleness_name(PipelineStaleness::kOneStep), "one_step");
  EXPECT_THAT(test::error_of<InvalidArgument>([] { parse_pipeline_staleness("1"); }),
              AllOf(HasSubstr("unknown pipeline_staleness '1'"),
                    HasSubstr("valid names are 'none', 'one_step'")));
  EXPECT_THAT(test::error_of<InvalidArgument>(
                  [] { pipeline_staleness_name(static_cast<PipelineStaleness>(2)); }),
              HasSubstr("PipelineStaleness value 2"));
}

}  // namespace
}  // namespace recemb

// vocabulary_resize_name and parse_vocabulary_resize (recemb/checkpoint.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "recemb/checkpoint.h"
#include "recemb/error.h"

#include "testing/error_of.h"

namespace recemb {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(VocabularyResizeName, ParsesEveryNameBack) {
  for (const VocabularyResize resize :
       {VocabularyResize::kError, VocabularyResize::kGrow, VocabularyResize::kGrowOrShrink}) {
    EXPECT_EQ(parse_vocabulary_resize(vocabulary_resize_name(resize)), resize);
  }
  EXPECT_EQ(vocabulary_resize_name(VocabularyResize::kGrowOrShrink), "grow_or_shrink");
}

TEST(VocabularyResizeName, RejectsUnknownNamesAndValues) {
  EXPECT_THAT(test::error_of<InvalidArgument>([] { parse_vocabulary_resize("shrink"); }),
              AllOf(HasSubstr("unknown resize 'shrink'"),
                    HasSubstr("valid names are 'error', 'grow', 'grow_or_shrink'")));
  EXPECT_THAT(test::error_of<InvalidArgument>(
                  [] { vocabulary_resize_name(static_cast<VocabularyResize>(5)); }),
              HasSubstr("VocabularyResize value 5"));
}

}  // namespace
}  // namespace recemb

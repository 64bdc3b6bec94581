#include <gtest/gtest.h>

#include "recemb/config.h"
#include "recemb/error.h"

namespace recemb {
namespace {

TEST(WhenFull, NamesRoundTrip) {
  for (const WhenFull value :
       {WhenFull::kEvictLeastRecent, WhenFull::kEvictLeastFrequent, WhenFull::kError}) {
    EXPECT_EQ(parse_when_full(when_full_name(value)), value);
  }
  EXPECT_EQ(when_full_name(WhenFull::kEvictLeastRecent), "evict_least_recent");
  EXPECT_EQ(when_full_name(WhenFull::kEvictLeastFrequent), "evict_least_frequent");
  EXPECT_EQ(when_full_name(WhenFull::kError), "error");
}

TEST(WhenFull, UnknownNameListsTheValidOnes) {
  try {
    parse_when_full("evict_random");
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "unknown when_full 'evict_random'; valid names are 'evict_least_recent', "
                 "'evict_least_frequent', 'error'");
  }
  EXPECT_THROW(when_full_name(static_cast<WhenFull>(7)), InvalidArgument);
}

}  // namespace
}  // namespace recemb

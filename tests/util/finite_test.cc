#include "util/finite.h"

#include <cmath>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <vector>

namespace recemb::internal {
namespace {

// Against std::isfinite on every index, for random finite values (normal, subnormal, zero, the
// largest finite) with one non-finite value planted at each position in turn.
TEST(FirstNonFiniteTest, MatchesIsFinite) {
  std::mt19937 random(3);
  std::uniform_real_distribution<float> value(-1e3f, 1e3f);
  std::vector<float> values(37);
  for (float& v : values) v = value(random);
  values[3] = std::numeric_limits<float>::max();
  values[4] = -std::numeric_limits<float>::denorm_min();
  values[5] = -0.0f;
  values[6] = std::numeric_limits<float>::lowest();
  EXPECT_EQ(first_non_finite(values), -1);
  EXPECT_EQ(first_non_finite({}), -1);
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
        std::numeric_limits<float>::signaling_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    for (size_t i = 0; i < values.size(); ++i) {
      std::vector<float> with_bad = values;
      with_bad[i] = bad;
      if (i + 5 < values.size()) with_bad[i + 5] = bad;  // the first one is reported
      EXPECT_EQ(first_non_finite(with_bad), static_cast<int64_t>(i)) << bad << " at " << i;
    }
  }
}

}  // namespace
}  // namespace recemb::internal

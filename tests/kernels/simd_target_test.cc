#include "kernels/simd_target.h"

#include <gtest/gtest.h>
#include <set>

namespace recemb::internal {
namespace {

TEST(SimdTargetTest, ListsDistinctTargetsBestFirst) {
  const std::vector<SimdTarget> targets = supported_simd_targets();
  ASSERT_FALSE(targets.empty());
  std::set<std::string> names;
  for (size_t i = 0; i < targets.size(); ++i) {
    EXPECT_EQ(targets[i] & (targets[i] - 1), 0) << "one bit per target";
    if (i > 0) {
      EXPECT_LT(targets[i - 1], targets[i]) << "Highway: lower bits are better";
    }
    names.insert(simd_target_name(targets[i]));
  }
  EXPECT_EQ(names.size(), targets.size());
  EXPECT_EQ(names.count("Unknown"), 0u);
  // The last is the portable fallback every CPU runs (with GCC 12, HWY_SCALAR: 1-lane vectors).
  const std::string fallback = simd_target_name(targets.back());
  EXPECT_TRUE(fallback == "SCALAR" || fallback == "EMU128") << fallback;
}

TEST(SimdTargetTest, DispatchesTheBestTargetUnlessForced) {
  const std::vector<SimdTarget> targets = supported_simd_targets();
  EXPECT_EQ(dispatched_simd_target(), targets.front());
  for (const SimdTarget target : targets) {
    {
      const ScopedSimdTarget forced(target);
      EXPECT_EQ(dispatched_simd_target(), target) << simd_target_name(target);
    }
    EXPECT_EQ(dispatched_simd_target(), targets.front()) << "after " << simd_target_name(target);
  }
}

}  // namespace
}  // namespace recemb::internal

#include "kernels/simd_target.h"

#include "util/check.h"

// Compiled for every target, as the kernels are, so that the dispatch below is the kernels' own.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd_target.cc"
#include <hwy/foreach_target.h>  // before highway.h
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace recemb::internal::HWY_NAMESPACE {

SimdTarget compiled_target() { return HWY_TARGET; }

}  // namespace recemb::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recemb::internal {

HWY_EXPORT(compiled_target);

std::vector<SimdTarget> supported_simd_targets() { return hwy::SupportedAndGeneratedTargets(); }

std::string simd_target_name(SimdTarget target) { return hwy::TargetName(target); }

SimdTarget dispatched_simd_target() { return HWY_DYNAMIC_DISPATCH(compiled_target)(); }

ScopedSimdTarget::ScopedSimdTarget(SimdTarget target) {
  RECEMB_CHECK(target != 0 && (target & (target - 1)) == 0);  // one target
  RECEMB_CHECK((hwy::SupportedTargets() & HWY_TARGETS & target) != 0);
  hwy::SetSupportedTargetsForTest(target);
}

ScopedSimdTarget::~ScopedSimdTarget() { hwy::SetSupportedTargetsForTest(0); }

}  // namespace recemb::internal
#endif  // HWY_ONCE

// The slot variables an optimizer keeps per table.
#ifndef RECEMB_OPTIMIZERS_SLOT_SPEC_H_
#define RECEMB_OPTIMIZERS_SLOT_SPEC_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/optimizer.h"

namespace recemb::internal {

// The values a slot holds, so that the optimizer's next update stays finite. Accumulators and
// second moments are sums of squares whose square root (or power) the update takes: Adagrad's and
// FTRL's start at initial_accumulator_value > 0 and are divided by with no epsilon, so they must
// stay > 0; AdagradMomentum's and RowwiseAdagrad's accumulators and Adam's velocities have an
// epsilon, and must stay >= 0. Any other slot (momenta, linears) holds any finite value.
enum class SlotRange { kFinite, kAtLeastZero, kAboveZero };

struct SlotSpec {
  std::string name;     // TF's slot name, e.g. "accumulators"
  int64_t width;        // floats per row: the table's dim, or 1 for a row-wise slot
  float initial_value;  // every slot value starts here
  SlotRange range;      // the values it holds (a written value must be in it)
};

// Whether `value` lies in `range` (NaN and +-inf never do).
inline bool in_range(SlotRange range, float value) {
  switch (range) {
    case SlotRange::kAtLeastZero:
      return std::isfinite(value) && value >= 0.0f;
    case SlotRange::kAboveZero:
      return std::isfinite(value) && value > 0.0f;
    case SlotRange::kFinite:
      break;
  }
  return std::isfinite(value);
}

// `range` as messages state it: "finite", "finite and >= 0", "finite and > 0".
inline std::string_view range_text(SlotRange range) {
  switch (range) {
    case SlotRange::kAtLeastZero:
      return "finite and >= 0";
    case SlotRange::kAboveZero:
      return "finite and > 0";
    case SlotRange::kFinite:
      break;
  }
  return "finite";
}

// The slots of `optimizer` for a table of width `dim`, in TF's order (see slot_names()).
std::vector<SlotSpec> slot_specs(const Optimizer& optimizer, int64_t dim);

}  // namespace recemb::internal

#endif  // RECEMB_OPTIMIZERS_SLOT_SPEC_H_

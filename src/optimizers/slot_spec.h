// The slot variables an optimizer keeps per table.
#ifndef RECEMB_OPTIMIZERS_SLOT_SPEC_H_
#define RECEMB_OPTIMIZERS_SLOT_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "recemb/optimizer.h"

namespace recemb::internal {

struct SlotSpec {
  std::string name;     // TF's slot name, e.g. "accumulators"
  int64_t width;        // floats per row: the table's dim, or 1 for a row-wise slot
  float initial_value;  // every slot value starts here
};

// The slots of `optimizer` for a table of width `dim`, in TF's order (see slot_names()).
std::vector<SlotSpec> slot_specs(const Optimizer& optimizer, int64_t dim);

}  // namespace recemb::internal

#endif  // RECEMB_OPTIMIZERS_SLOT_SPEC_H_

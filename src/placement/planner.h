// The planner behind recemb::plan_placement (placement.h), for a caller that has validated the
// configs already (the Embedding constructor, through config/validate.h).
#ifndef RECEMB_PLACEMENT_PLANNER_H_
#define RECEMB_PLACEMENT_PLANNER_H_

#include <optional>
#include <vector>

#include "recemb/config.h"
#include "recemb/optimizer.h"
#include "recemb/placement.h"

namespace recemb::internal {

// plan_placement for configs that validate_configs accepted: validates `options` only (throwing
// InvalidArgument as plan_placement does), not the tables, the features or the optimizer.
Placement plan_valid_placement(const std::vector<TableConfig>& tables,
                               const std::vector<FeatureConfig>& features,
                               const std::optional<Optimizer>& global_optimizer,
                               const PlacementOptions& options);

}  // namespace recemb::internal

#endif  // RECEMB_PLACEMENT_PLANNER_H_

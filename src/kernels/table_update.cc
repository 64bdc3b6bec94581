#include "kernels/table_update.h"

#include "optimizers/row_update.h"

// foreach_target.h includes this file again for each target; HWY_BEFORE_NAMESPACE makes every
// function defined below code for that target, and [[gnu::flatten]] inlines the generic templates
// they call (a baseline callee inlines into any target caller), so the whole per-row loop is built
// for the target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/table_update.cc"
#include <hwy/foreach_target.h>  // before highway.h
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace recemb::internal::HWY_NAMESPACE {

template <class Pipeline>
[[gnu::flatten]] int64_t rows_with(const Pipeline& pipeline, const TableUpdate& update,
                                   UpdateRange range, UpdateScratch scratch) {
  switch (range.rows) {
    case UpdateRows::kSingle:
      return internal::update_single_rows(pipeline, update.variables, *update.grouping,
                                          update.contributions, update.mode, range.first,
                                          range.last, scratch);
    case UpdateRows::kShared:
      return internal::update_shared_rows(pipeline, update.variables, *update.grouping,
                                          update.contributions, update.mode, range.first,
                                          range.last, scratch);
    case UpdateRows::kAll:
      return internal::update_all_rows(pipeline, update.variables, *update.grouping,
                                       update.contributions, update.mode, range.first, range.last,
                                       scratch);
  }
  return 0;
}

int64_t update_rows(const TableUpdate& update, UpdateRange range, UpdateScratch scratch) {
  int64_t skipped = 0;
  visit_row_pipeline(
      *update.optimizer, update.learning_rate, update.step,
      [&](const auto& pipeline) { skipped = rows_with(pipeline, update, range, scratch); });
  return skipped;
}

}  // namespace recemb::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recemb::internal {

HWY_EXPORT(update_rows);

int64_t update_rows(const TableUpdate& update, UpdateRange range, UpdateScratch scratch) {
  return HWY_DYNAMIC_DISPATCH(update_rows)(update, range, scratch);
}

}  // namespace recemb::internal
#endif  // HWY_ONCE

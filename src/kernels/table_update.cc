#include "kernels/table_update.h"

#include <array>
#include <cstddef>

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

template <int64_t kDim, class Pipeline>
[[gnu::flatten]] int64_t rows_with(const Pipeline& pipeline, const TableUpdate& update,
                                   UpdateRange range, UpdateScratch scratch) {
  switch (range.rows) {
    case UpdateRows::kSingle:
      return internal::update_single_rows<kDim>(pipeline, update.variables, *update.grouping,
                                                update.contributions, update.mode, range.first,
                                                range.last, scratch);
    case UpdateRows::kShared:
      return internal::update_shared_rows<kDim>(pipeline, update.variables, *update.grouping,
                                                update.contributions, update.mode, range.first,
                                                range.last, scratch);
    case UpdateRows::kAll:
      return internal::update_all_rows<kDim>(pipeline, update.variables, *update.grouping,
                                             update.contributions, update.mode, range.first,
                                             range.last, scratch);
  }
  return 0;
}

// The row widths compiled as constants (kernels/sparse_update.h's kDim). On the legacy x86
// targets only the run-time width is built: a constant width multiplies this file's compile time,
// and those CPUs are not where speed is measured.
#if HWY_TARGET == HWY_SSSE3 || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_EMU128 || \
    HWY_TARGET == HWY_SCALAR
constexpr std::array<int64_t, 0> kConstantWidths{};
#else
constexpr std::array<int64_t, 4> kConstantWidths{16, 32, 64, 128};
#endif

// rows_with<kConstantWidths[i]> for the first i from `index` whose width is `dim`, else the
// run-time width.
template <size_t index = 0, class Pipeline>
int64_t rows_of_width(int64_t dim, const Pipeline& pipeline, const TableUpdate& update,
                      UpdateRange range, UpdateScratch scratch) {
  if constexpr (index == kConstantWidths.size()) {
    return rows_with<0>(pipeline, update, range, scratch);
  } else {
    if (dim == kConstantWidths[index]) {
      return rows_with<kConstantWidths[index]>(pipeline, update, range, scratch);
    }
    return rows_of_width<index + 1>(dim, pipeline, update, range, scratch);
  }
}

int64_t update_rows(const TableUpdate& update, UpdateRange range, UpdateScratch scratch) {
  int64_t skipped = 0;
  visit_row_pipeline(
      *update.optimizer, update.learning_rate, update.step, [&](const auto& pipeline) {
        skipped = rows_of_width(update.variables.dim, pipeline, update, range, scratch);
      });
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

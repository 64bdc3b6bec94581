#include "embedding/table_state.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "recemb/error.h"

#include "kernels/half_precision.h"
#include "optimizers/slot_spec.h"
#include "storage/initializer.h"
#include "util/check.h"
#include "util/work_split.h"

namespace recemb::internal {

TableState::TableState(TableConfig table, TablePart part, std::optional<Optimizer> optimizer,
                       uint64_t table_seed)
    : table_(std::move(table)),
      part_(part),
      optimizer_(std::move(optimizer)),
      storage_(table_.name, part_.rows + (part_.keyed ? 1 : 0), part_.num_columns,
               optimizer_ ? slot_specs(*optimizer_, part_.num_columns) : std::vector<SlotSpec>{},
               table_.dtype),
      table_seed_(table_seed),
      dynamic_(part_.keyed ? std::make_unique<DynamicPart>(table_, part_, table_seed) : nullptr) {
  RECEMB_CHECK(storage_.slot_specs().size() <= RowVariables{}.slot_bases.size());
}

int64_t TableState::row_bytes() const {
  int64_t bytes = columns() * dtype_bytes(table_.dtype);
  for (const SlotSpec& spec : storage_.slot_specs()) {
    bytes += spec.width * static_cast<int64_t>(sizeof(float));
  }
  return bytes;
}

bool TableState::updates_all_rows() const {
  const Adam* adam = optimizer_ ? std::get_if<Adam>(&*optimizer_) : nullptr;
  return adam != nullptr && !adam->lazy_adam;
}

void TableState::record_update() {
  if (!optimizer_ || !changes_.tracking()) return;
  if (updates_all_rows()) {
    changes_.mark_all();
  } else {
    for (const int64_t row : grouping_.unique_rows()) changes_.mark(row);
  }
}

void TableState::initialize(uint64_t table_seed, int64_t first_row, int64_t num_rows) {
  if (part_.whole && table_.dtype == DType::kFloat32) {
    initialize_rows(
        table_.initializer, table_seed, first_row, num_rows, table_.dim,
        std::span<float>(storage_.row(first_row), static_cast<size_t>(num_rows * table_.dim)));
  } else {
    // A row at a time: the part's rows (row-wise) or columns (column-wise) of the table's rows,
    // rounded to nearest in a 16-bit table.
    std::vector<float> row(static_cast<size_t>(table_.dim));
    for (int64_t local = first_row; local < first_row + num_rows; ++local) {
      const int64_t global = part_.global_row(local);
      initialize_rows(table_.initializer, table_seed, global, 1, table_.dim, row);
      if (table_.dtype == DType::kFloat16) check_float16_range(row, global);
      storage_.write_rows(local, 1, row.data() + part_.first_column);
    }
  }
  storage_.initialize_slots(first_row, num_rows);
}

void TableState::check_float16_range(std::span<const float> row, int64_t global_row) const {
  for (size_t d = 0; d < row.size(); ++d) {
    if (!fits_float16(row[d])) {
      throw InvalidArgument("table '" + table_.name + "': initial value " + std::to_string(row[d]) +
                            " of row " + std::to_string(global_row) + ", column " +
                            std::to_string(d) +
                            " is beyond float16's range (|x| < 65520); use dtype 'bfloat16' or "
                            "an initializer within it");
    }
  }
}

void TableState::gather_contributions(std::span<const ContributionSegment> segments,
                                      support::ThreadPool* pool) {
  size_t total = 0;
  for (const ContributionSegment& segment : segments) {
    total += static_cast<size_t>(segment.section->num_ids);
  }
  contribution_rows_.resize(total);
  contribution_gains_.resize(total);
  contribution_sources_.resize(total);
  // Bags [first_bag, last_bag) of one segment, whose contributions start at `first`.
  const auto list_bags = [&](const ContributionSegment& segment, size_t first, int64_t first_bag,
                             int64_t last_bag) {
    // Copies, not references: a store through int64_t*, float* or const float** could otherwise
    // make the compiler reload the section's pointers and the arrays' for every contribution.
    const RequestSection section = *segment.section;
    int64_t* const rows = contribution_rows_.data();
    float* const gains = contribution_gains_.data();
    const float** const sources = contribution_sources_.data();
    size_t next = first + static_cast<size_t>(section.offsets[first_bag]);
    for (int64_t i = first_bag; i < last_bag; ++i) {
      const float* source = segment.gradient + i * segment.gradient_stride;
      for (int64_t j = section.offsets[i]; j < section.offsets[i + 1]; ++j) {
        rows[next] = section.ids[j];
        gains[next] = section.gain(i, j);
        sources[next] = source;
        ++next;
      }
    }
  };
  size_t listed = 0;  // contributions of the segments before this one
  for (const ContributionSegment& segment : segments) {
    const RequestSection& section = *segment.section;
    if (pool == nullptr || section.num_ids < 2 * kContributionsPerListingTask) {
      list_bags(segment, listed, 0, section.num_bags);
    } else {
      pool->parallel_for_ranges(
          section.num_bags,
          bags_per_task(section.num_bags, section.num_ids, kContributionsPerListingTask),
          [&](int64_t first_bag, int64_t last_bag, int) {
            list_bags(segment, listed, first_bag, last_bag);
          });
    }
    listed += static_cast<size_t>(section.num_ids);
  }
  group_contributions(pool);
}

void TableState::group_contributions(support::ThreadPool* pool) {
  grouping_.build(contribution_rows_, rows(), row_bytes(), pool);
  const std::span<const uint32_t> order = grouping_.order();
  sorted_gains_.resize(order.size());
  sorted_sources_.resize(order.size());
  const auto permute = [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      sorted_gains_[i] = contribution_gains_[order[i]];
      sorted_sources_[i] = contribution_sources_[order[i]];
    }
  };
  // Only update_all_rows reads the sorted contributions of rows with one (Contributions).
  const bool every_row = updates_all_rows();
  const std::span<const uint32_t> starts = grouping_.segment_starts();
  const std::span<const uint32_t> shared = grouping_.shared_rows();
  const auto permute_range = [&](int64_t first, int64_t last, int) {
    if (every_row) {
      permute(static_cast<size_t>(first), static_cast<size_t>(last));
      return;
    }
    for (auto j = static_cast<size_t>(first); j < static_cast<size_t>(last); ++j) {
      permute(starts[shared[j]], starts[shared[j] + 1]);
    }
  };
  const auto n = static_cast<int64_t>(every_row ? order.size() : shared.size());
  if (pool == nullptr) {
    permute_range(0, n, 0);
  } else {
    pool->parallel_for_ranges(
        n, every_row ? kContributionsPerPermuteTask : kSharedRowsPerPermuteTask, permute_range);
  }
}

RowVariables TableState::variables(int64_t step) {
  RowVariables variables{.parameters = storage_.row(0), .dim = columns()};
  if (table_.dtype != DType::kFloat32) {
    variables.halves = storage_.half_row(0);
    variables.dtype = table_.dtype;
    variables.rounding = table_.rounding;
    variables.step_stream = rounding_step_stream(table_seed_, step);
    // Local row r is the table's row r * row_stride + shard (placement/partition.h).
    variables.row_stride = part_.strategy == ShardingStrategy::kRowWise ? part_.row_stride : 1;
    variables.row_offset = part_.strategy == ShardingStrategy::kRowWise ? part_.shard : 0;
    if (dynamic_ != nullptr) variables.row_keys = dynamic_->index().keys_by_slot();
    variables.first_column = part_.first_column;
  }
  const auto& specs = storage_.slot_specs();
  variables.num_slots = static_cast<int>(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    variables.slot_bases[i] = storage_.slot_bases()[i];
    variables.slot_widths[i] = specs[i].width;
  }
  return variables;
}

}  // namespace recemb::internal

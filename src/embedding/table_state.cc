#include "embedding/table_state.h"

#include <utility>

#include "optimizers/slot_spec.h"
#include "storage/initializer.h"
#include "util/check.h"

namespace recemb::internal {
namespace {

constexpr int64_t kContributionsPerTask = 16384;
constexpr int64_t kContributionsPerListingTask = 8192;
constexpr int64_t kSharedRowsPerTask = 4096;

}  // namespace

TableState::TableState(TableConfig config, std::optional<Optimizer> optimizer)
    : config_(std::move(config)),
      optimizer_(std::move(optimizer)),
      storage_(config_.vocabulary_size, config_.dim,
               optimizer_ ? slot_specs(*optimizer_, config_.dim) : std::vector<SlotSpec>{}) {
  RECEMB_CHECK(storage_.slot_specs().size() <= RowVariables{}.slot_bases.size());
}

int64_t TableState::row_bytes() const {
  int64_t floats = config_.dim;
  for (const SlotSpec& spec : storage_.slot_specs()) floats += spec.width;
  return floats * static_cast<int64_t>(sizeof(float));
}

bool TableState::updates_all_rows() const {
  const Adam* adam = optimizer_ ? std::get_if<Adam>(&*optimizer_) : nullptr;
  return adam != nullptr && !adam->lazy_adam;
}

void TableState::initialize_block(uint64_t table_seed, int64_t first_row, int64_t num_rows) {
  const int64_t dim = config_.dim;
  initialize_rows(config_.initializer, table_seed, first_row, num_rows, dim,
                  std::span<float>(storage_.row(first_row), static_cast<size_t>(num_rows * dim)));
  storage_.initialize_slots(first_row, num_rows);
}

void TableState::gather_contributions(const std::vector<size_t>& features,
                                      const std::vector<CsrFeature>& batch,
                                      std::span<const std::span<const float>> gradients,
                                      const float* zeros, ThreadPool* pool) {
  size_t total = 0;
  for (const size_t f : features) total += batch[f].ids.size();
  resize_contributions(total);
  const int64_t dim = config_.dim;
  // Bags [first_bag, last_bag) of one feature, its contributions from `first` on.
  const auto list_bags = [&](const CsrFeature& csr, const float* gradient, size_t first,
                             int64_t first_bag, int64_t last_bag) {
    size_t next = first + static_cast<size_t>(csr.offsets[static_cast<size_t>(first_bag)]);
    for (int64_t b = first_bag; b < last_bag; ++b) {
      const float scale = csr.bag_scales[static_cast<size_t>(b)];
      const float* source = gradient != nullptr ? gradient + b * dim : zeros;
      for (int64_t j = csr.offsets[static_cast<size_t>(b)];
           j < csr.offsets[static_cast<size_t>(b) + 1]; ++j) {
        const auto index = static_cast<size_t>(j);
        contribution_rows_[next] = csr.ids[index];
        contribution_gains_[next] = csr.weights.empty() ? scale : csr.weights[index] * scale;
        contribution_sources_[next] = source;
        ++next;
      }
    }
  };
  size_t listed = 0;  // contributions of the features before f
  for (const size_t f : features) {
    const CsrFeature& csr = batch[f];
    const float* gradient = gradients[f].empty() ? nullptr : gradients[f].data();
    const auto ids = static_cast<int64_t>(csr.ids.size());
    if (pool == nullptr || ids < 2 * kContributionsPerListingTask) {
      list_bags(csr, gradient, listed, 0, csr.num_bags());
    } else {
      pool->parallel_for_ranges(csr.num_bags(),
                                bags_per_task(csr.num_bags(), ids, kContributionsPerListingTask),
                                [&](int64_t first_bag, int64_t last_bag, int) {
                                  list_bags(csr, gradient, listed, first_bag, last_bag);
                                });
    }
    listed += csr.ids.size();
  }
  group_contributions(pool);
}

TableState::ContributionArrays TableState::resize_contributions(size_t count) {
  contribution_rows_.resize(count);
  contribution_gains_.resize(count);
  contribution_sources_.resize(count);
  return {contribution_rows_.data(), contribution_gains_.data(), contribution_sources_.data()};
}

void TableState::group_contributions(ThreadPool* pool) {
  grouping_.build(contribution_rows_, config_.vocabulary_size, row_bytes(), pool);
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
    pool->parallel_for_ranges(n, every_row ? kContributionsPerTask : kSharedRowsPerTask,
                              permute_range);
  }
}

RowVariables TableState::variables() {
  RowVariables variables{.parameters = storage_.row(0), .dim = config_.dim};
  const auto& specs = storage_.slot_specs();
  variables.num_slots = static_cast<int>(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    variables.slot_bases[i] = storage_.slot_bases()[i];
    variables.slot_widths[i] = specs[i].width;
  }
  return variables;
}

}  // namespace recemb::internal

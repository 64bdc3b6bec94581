#include "batch/csr_feature.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "recemb/error.h"

#include "batch/input_layout.h"
#include "support/thread_pool.h"
#include "util/check.h"
#include "util/work_split.h"

// Every input kind is reduced to one of three walks over its entries in storage order:
//   plain:    dense and ragged ids that are not sequences, where row r, holding entries
//             [row_begin(r), row_begin(r + 1)), is bag r: the ids and weights are copied whole
//             and the offsets are the row starts (dense [B, N]: r * N);
//   sequence: dense and ragged sequences, whose rows are truncated or padded to L bags of <= 1 id;
//   sparse:   COO entries, whose bag is the row-major index of indices[i, :-1].
// The plain and sequence walks run after check_entries has validated every entry, so a bad id
// leaves `out` untouched and the copies carry no branches; the sparse walk checks each entry's
// index, then its id, as it goes. A failure throws from a cold function that re-derives the
// entry's location from its storage index, so the loops carry no location bookkeeping.
// bag_scales are computed last from the written offsets and weights (write_scales), the same for
// every walk; a sum combiner's are all 1 and unweighted bags of one id count share one scale.

namespace recemb::internal {
namespace {

[[noreturn]] void fail_id(const FeatureContext& context, int64_t i, int64_t id) {
  fail_feature(context, describe_entry(context, i) + ": id " + std::to_string(id) +
                            " is out of range [0, " +
                            std::to_string(context.table.vocabulary_size) + ")");
}

[[noreturn]] void fail_weight(const FeatureContext& context, int64_t i, float weight) {
  fail_feature(context, describe_entry(context, i) + ": weight " + std::to_string(weight) +
                            " is not finite (validate_weights_and_indices is set)");
}

struct Entry {
  int64_t id;
  float weight;
};

// Reads and validates storage entry i of the input's ids and weights.
template <typename Id, bool kWeighted>
class Entries {
 public:
  Entries(const FeatureContext& context, std::span<const Id> ids, std::span<const float> weights)
      : context_(context),
        ids_(ids.data()),
        weights_(weights.data()),
        size_(static_cast<int64_t>(ids.size())),
        vocabulary_size_(
            static_cast<uint64_t>(std::max<int64_t>(context.table.vocabulary_size, 0))),
        check_ids_(!context.table.dynamic_vocabulary),
        check_weights_(context.feature.validate_weights_and_indices) {}

  static constexpr bool kHasWeights = kWeighted;
  int64_t size() const { return size_; }
  const FeatureContext& context() const { return context_; }
  const Id* ids() const { return ids_; }
  const float* weights() const { return weights_; }

  Entry load(int64_t i) const {
    const auto id = static_cast<int64_t>(ids_[i]);
    // One unsigned comparison rejects negative ids as well. A dynamic table's keys are any int64.
    if (check_ids_ && static_cast<uint64_t>(id) >= vocabulary_size_) [[unlikely]]
      fail_id(context_, i, id);
    if constexpr (kWeighted) {
      const float weight = weights_[i];
      if (check_weights_ && !std::isfinite(weight)) [[unlikely]]
        fail_weight(context_, i, weight);
      return {id, weight};
    } else {
      return {id, 1.0f};
    }
  }

  // Whether load() accepts every entry, by branch-free scans that vectorise with plain SSE2 (no
  // 64-bit comparison there; std::isfinite does not vectorise). The top bit of the accumulators is
  // set exactly when an entry fails: for id = u as uint64 and V = vocabulary_size_, u | (V - 1 - u)
  // when u >= V (negative ids included; V = 0 rejects every id), and for a weight's bits w,
  // (w & exponent) + lowest exponent bit when the exponent is all ones (inf, nan).
  bool all_valid() const { return all_valid(0, size_); }

  // The same for entries [first, last).
  bool all_valid(int64_t first, int64_t last) const {
    uint64_t id_bits = 0;
    if (check_ids_) {
      for (int64_t i = first; i < last; ++i) {
        const auto id = static_cast<uint64_t>(static_cast<int64_t>(ids_[i]));
        id_bits |= id | (vocabulary_size_ - 1 - id);
      }
    }
    uint32_t weight_bits = 0;
    if constexpr (kWeighted) {
      if (check_weights_) {
        constexpr uint32_t kExponent = 0x7f80'0000;
        for (int64_t i = first; i < last; ++i) {
          weight_bits |= (std::bit_cast<uint32_t>(weights_[i]) & kExponent) + 0x80'0000;
        }
      }
    }
    return (id_bits >> 63) == 0 && (weight_bits >> 31) == 0;
  }

 private:
  const FeatureContext& context_;
  const Id* ids_;
  const float* weights_;
  int64_t size_;
  uint64_t vocabulary_size_;
  bool check_ids_;
  bool check_weights_;
};

// Validates every entry before anything is written: throws for the first one (in storage order,
// its id before its weight) that load() rejects.
template <typename EntriesT>
void check_entries(const EntriesT& entries) {
  if (entries.all_valid()) [[likely]]
    return;
  for (int64_t i = 0; i < entries.size(); ++i) entries.load(i);
}

float bag_scale(Combiner combiner, double sum_weights, double sum_squared_weights) {
  switch (combiner) {
    case Combiner::kSum:
      return 1.0f;
    case Combiner::kMean:
      return sum_weights == 0.0 ? 0.0f : static_cast<float>(1.0 / sum_weights);
    case Combiner::kSqrtn:
      return sum_squared_weights == 0.0 ? 0.0f
                                        : static_cast<float>(1.0 / std::sqrt(sum_squared_weights));
  }
  return 0.0f;
}

// Sizes out for num_bags bags of at most max_ids ids; within capacity this never allocates.
void size_output(int64_t num_bags, int64_t max_ids, bool weighted, CsrFeature& out) {
  out.offsets.resize(static_cast<size_t>(num_bags) + 1);
  out.offsets[0] = 0;
  out.bag_scales.resize(static_cast<size_t>(num_bags));
  out.ids.resize(static_cast<size_t>(max_ids));
  out.weights.resize(weighted ? static_cast<size_t>(max_ids) : 0);
}

void keep_ids(int64_t size, CsrFeature& out) {
  out.ids.resize(static_cast<size_t>(size));
  if (!out.weights.empty()) out.weights.resize(static_cast<size_t>(size));
}

// Writes bag_scales from the written offsets and weights. A bag's weights are summed in double, in
// storage order; unweighted bags use their id count.
void write_scales(Combiner combiner, CsrFeature& out) {
  const int64_t num_bags = out.num_bags();
  const int64_t* offsets = out.offsets.data();
  float* scales = out.bag_scales.data();
  if (combiner == Combiner::kSum) {
    std::fill_n(scales, num_bags, 1.0f);
  } else if (out.weights.empty()) {
    // Neighbouring bags mostly hold as many ids, so a scale is recomputed only when the count
    // changes (a division, and a square root for sqrtn, per bag otherwise).
    int64_t count = 0;
    float scale = bag_scale(combiner, 0.0, 0.0);
    for (int64_t b = 0; b < num_bags; ++b) {
      const int64_t bag_count = offsets[b + 1] - offsets[b];
      if (bag_count != count) {
        count = bag_count;
        scale = bag_scale(combiner, static_cast<double>(count), static_cast<double>(count));
      }
      scales[b] = scale;
    }
  } else {
    const float* weights = out.weights.data();
    for (int64_t b = 0; b < num_bags; ++b) {
      double sum = 0.0;
      double sum_squares = 0.0;
      for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
        sum += weights[j];
        sum_squares += static_cast<double>(weights[j]) * weights[j];
      }
      scales[b] = bag_scale(combiner, sum, sum_squares);
    }
  }
}

// Inputs that are not sequences, where bag r is row r, holding entries [row_begin(r),
// row_begin(r + 1)): the rows cover the entries in storage order, so the ids and weights are
// copied whole and the offsets are the row starts. bag_size is the ids per row when every row has
// as many (dense ids), so unweighted bags share one scale; else nullopt.
// With a pool, the entries are checked and copied in ranges on its threads (a batch's ids are
// often not in cache, and one thread reads them at a fraction of the memory's bandwidth); a bad
// entry is then found again in storage order on the calling thread, so the error is the same.
template <typename EntriesT, typename RowBegin>
void fill_plain(const EntriesT& entries, int64_t num_rows, RowBegin row_begin,
                std::optional<int64_t> bag_size, support::ThreadPool* pool, CsrFeature& out) {
  constexpr bool kWeighted = EntriesT::kHasWeights;
  const int64_t size = entries.size();
  size_output(num_rows, size, kWeighted, out);
  std::atomic<bool> valid{true};
  const auto check_and_copy = [&](int64_t first, int64_t last) {
    if (!entries.all_valid(first, last)) {
      valid.store(false, std::memory_order_relaxed);
      return;
    }
    std::copy(entries.ids() + first, entries.ids() + last, out.ids.data() + first);  // int32 too
    if constexpr (kWeighted) {
      std::copy(entries.weights() + first, entries.weights() + last, out.weights.data() + first);
    }
  };
  if (pool == nullptr) {
    check_and_copy(0, size);
  } else {
    const int64_t tasks = (size + kIdsPerNormalizeTask - 1) / kIdsPerNormalizeTask;
    pool->parallel_for(tasks,
                       [&](int64_t task, int) {
                         const int64_t first = task * kIdsPerNormalizeTask;
                         check_and_copy(first, std::min(size, first + kIdsPerNormalizeTask));
                       },
                       {.work = size, .min_work_for_threads = kMinIdsForThreads});
  }
  if (!valid.load(std::memory_order_relaxed)) {
    check_entries(entries);  // throws for the first bad entry
    RECEMB_CHECK(false);
  }
  int64_t* offsets = out.offsets.data();
  for (int64_t row = 1; row <= num_rows; ++row) offsets[row] = row_begin(row);
  const Combiner combiner = entries.context().table.combiner;
  if (!kWeighted && bag_size) {
    const auto count = static_cast<double>(*bag_size);
    std::fill_n(out.bag_scales.data(), num_rows, bag_scale(combiner, count, count));
  } else {
    write_scales(combiner, out);
  }
}

// A sequence (layout.sequence_length L > 0) of rows as fill_plain reads them: row r gives the L
// bags r * L + p, position p of the row or padding, and drops the positions from L on.
// The fills keep their cursors in locals rather than in a writer object: a member counter is
// reloaded after every store through the int64_t output pointers (measured 1.5-2x slower).
template <typename EntriesT, typename RowBegin>
void fill_sequence(const EntriesT& entries, InputLayout layout, RowBegin row_begin,
                   CsrFeature& out) {
  constexpr bool kWeighted = EntriesT::kHasWeights;
  check_entries(entries);  // positions a sequence drops are validated too
  const int64_t length = layout.sequence_length;
  size_output(layout.num_bags(), entries.size(), kWeighted, out);
  int64_t* offsets = out.offsets.data();
  int64_t* ids = out.ids.data();
  float* weights = out.weights.data();
  const auto* entry_ids = entries.ids();
  const float* entry_weights = entries.weights();
  int64_t size = 0;
  for (int64_t row = 0; row < layout.num_rows; ++row) {
    const int64_t begin = row_begin(row);
    const int64_t kept = std::min(row_begin(row + 1) - begin, length);
    for (int64_t p = 0; p < length; ++p) {
      if (p < kept) {
        ids[size] = static_cast<int64_t>(entry_ids[begin + p]);
        if constexpr (kWeighted) weights[size] = entry_weights[begin + p];
        ++size;
      }
      offsets[row * length + p + 1] = size;
    }
  }
  keep_ids(size, out);
  write_scales(entries.context().table.combiner, out);
}

template <typename Split>
void check_row_splits(const FeatureContext& context, std::span<const Split> splits,
                      size_t num_ids) {
  const auto fail_split = [&](size_t b, const std::string& why) {
    fail_feature(context, "row_splits[" + std::to_string(b) + "] = " + std::to_string(splits[b]) +
                              " " + why);
  };
  if (splits[0] != 0) fail_split(0, "must be 0");
  for (size_t b = 1; b < splits.size(); ++b) {
    if (splits[b] < splits[b - 1]) {
      fail_split(b, "is less than row_splits[" + std::to_string(b - 1) +
                        "] = " + std::to_string(splits[b - 1]));
    }
  }
  const size_t last = splits.size() - 1;
  if (static_cast<size_t>(splits[last]) != num_ids) {
    fail_split(last, "must equal the number of values " + std::to_string(num_ids));
  }
}

// kRank is the rank when fixed at compile time (2, the common case, runs ~15% faster), else 0.
template <size_t kRank, typename EntriesT>
void fill_sparse(const EntriesT& entries, const SparseIds& sparse, InputLayout layout,
                 CsrFeature& out) {
  constexpr bool kWeighted = EntriesT::kHasWeights;
  const FeatureContext& context = entries.context();
  const int64_t length = layout.sequence_length;
  const int64_t num_bags = layout.num_bags();
  size_output(num_bags, entries.size(), kWeighted, out);
  int64_t* offsets = out.offsets.data();
  int64_t* ids = out.ids.data();
  float* weights = out.weights.data();
  int64_t size = 0;
  int64_t open_bag = 0;  // the bag being written; the ones before it are complete
  const auto close_bags_before = [&](int64_t bag) {
    for (; open_bag < bag; ++open_bag) offsets[open_bag + 1] = size;
  };
  const std::vector<int64_t>& dense_shape = sparse.dense_shape;
  const size_t rank = kRank > 0 ? kRank : dense_shape.size();
  const int64_t* index = sparse.indices.data();
  int64_t previous_bag = -1;
  int64_t previous_position = 0;
  for (int64_t i = 0; i < entries.size(); ++i, index += rank) {
    // Inside dense_shape, the row-major bag number orders the index prefixes as the tuples do.
    int64_t bag = 0;
    for (size_t d = 0; d < rank; ++d) {
      if (index[d] < 0 || index[d] >= dense_shape[d]) [[unlikely]] {
        fail_feature(context, "entry " + sparse_index(sparse, i) + " is outside dense_shape " +
                                  shape_string(dense_shape));
      }
      if (d + 1 < rank) bag = bag * dense_shape[d] + index[d];
    }
    const int64_t position = index[rank - 1];
    if (bag < previous_bag || (bag == previous_bag && position <= previous_position)) [[unlikely]] {
      fail_feature(context,
                   "entry " + sparse_index(sparse, i) + " follows entry " +
                       sparse_index(sparse, i - 1) +
                       "; indices must be in canonical (row-major, strictly increasing) order");
    }
    previous_bag = bag;
    previous_position = position;
    const Entry entry = entries.load(i);  // positions a sequence drops are validated too
    if (length == 0 || position < length) {
      close_bags_before(length == 0 ? bag : bag * length + position);
      ids[size] = entry.id;
      if constexpr (kWeighted) weights[size] = entry.weight;
      ++size;
    }
  }
  close_bags_before(num_bags);
  keep_ids(size, out);
  write_scales(context.table.combiner, out);
}

// Calls fill(entries) with the Entries view matching the id type and the presence of weights.
template <typename Fill>
void with_entries(const FeatureContext& context, const IdSpan& ids, std::span<const float> weights,
                  Fill&& fill) {
  std::visit(
      [&](auto typed) {
        using Id = typename decltype(typed)::value_type;
        if (weights.empty()) {
          fill(Entries<Id, false>(context, typed, weights));
        } else {
          fill(Entries<Id, true>(context, typed, weights));
        }
      },
      ids);
}

}  // namespace

void normalize_feature(const FeatureConfig& feature, const TableConfig& table,
                       const FeatureInput& input, CsrFeature& out, support::ThreadPool* pool) {
  const FeatureContext context{feature, table, input};
  const InputLayout layout = resolve_layout(context);

  const IdSpan& ids = input_ids(input);
  const std::span<const float> weights =
      std::visit([](const auto& typed) { return typed.weights; }, input);
  if (!weights.empty() && weights.size() != num_ids(ids)) {
    fail_feature(context, std::to_string(weights.size()) + " weights for " +
                              std::to_string(num_ids(ids)) + " ids");
  }

  if (const auto* dense = std::get_if<DenseIds>(&input)) {
    const int64_t bag_size = dense->shape.size() == 1 ? 1 : dense->shape.back();
    const auto row_begin = [bag_size](int64_t row) { return row * bag_size; };
    with_entries(context, ids, weights, [&](const auto& entries) {
      if (layout.sequence_length == 0) {
        fill_plain(entries, layout.num_rows, row_begin, bag_size, pool, out);
      } else {
        fill_sequence(entries, layout, row_begin, out);
      }
    });
  } else if (const auto* ragged = std::get_if<RaggedIds>(&input)) {
    std::visit(
        [&](auto splits) {
          check_row_splits(context, splits, num_ids(ids));
          const auto row_begin = [splits](int64_t row) {
            return static_cast<int64_t>(splits[static_cast<size_t>(row)]);
          };
          with_entries(context, ids, weights, [&](const auto& entries) {
            if (layout.sequence_length == 0) {
              fill_plain(entries, layout.num_rows, row_begin, std::nullopt, pool, out);
            } else {
              fill_sequence(entries, layout, row_begin, out);
            }
          });
        },
        ragged->row_splits);
  } else {
    const auto& sparse = std::get<SparseIds>(input);
    with_entries(context, ids, weights, [&](const auto& entries) {
      if (sparse.dense_shape.size() == 2) {
        fill_sparse<2>(entries, sparse, layout, out);
      } else {
        fill_sparse<0>(entries, sparse, layout, out);
      }
    });
  }
  write_activation_shape(layout, table.dim, out.activation_shape);
}

}  // namespace recemb::internal

#include "reference/reference_dynamic_table.h"

#include <cmath>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace recemb::reference {

ReferenceDynamicTable::ReferenceDynamicTable(int64_t dim, DynamicVocabulary vocabulary,
                                             Combiner combiner, Optimizer optimizer,
                                             double learning_rate, double initial_accumulator,
                                             InitialRow initial_row)
    : dim_(dim),
      vocabulary_(vocabulary),
      combiner_(combiner),
      optimizer_(optimizer),
      learning_rate_(learning_rate),
      initial_accumulator_(initial_accumulator),
      initial_row_(std::move(initial_row)) {}

double ReferenceDynamicTable::gain(const Bag& bag, size_t j) const {
  double sum = 0.0;
  double squares = 0.0;
  for (const Entry& entry : bag) {
    sum += entry.weight;
    squares += entry.weight * entry.weight;
  }
  const double w = bag[j].weight;
  switch (combiner_) {
    case Combiner::kSum:
      return w;
    case Combiner::kMean:
      return sum == 0.0 ? 0.0 : w / sum;
    case Combiner::kSqrtn:
      return squares == 0.0 ? 0.0 : w / std::sqrt(squares);
  }
  throw std::logic_error("combiner");
}

std::vector<std::vector<double>> ReferenceDynamicTable::lookup(const std::vector<Bag>& bags) const {
  std::vector<std::vector<double>> out;
  for (const Bag& bag : bags) {
    std::vector<double> activation(static_cast<size_t>(dim_), 0.0);
    for (size_t j = 0; j < bag.size(); ++j) {
      const auto found = rows_.find(bag[j].key);
      if (found == rows_.end()) continue;  // a zero row
      for (int64_t d = 0; d < dim_; ++d) {
        activation[static_cast<size_t>(d)] +=
            gain(bag, j) * found->second.values[static_cast<size_t>(d)];
      }
    }
    out.push_back(std::move(activation));
  }
  return out;
}

std::vector<std::vector<double>> ReferenceDynamicTable::train_lookup(const std::vector<Bag>& bags) {
  const int64_t step = step_ + 1;
  std::map<int64_t, int64_t> occurrences;
  for (const Bag& bag : bags) {
    for (const Entry& entry : bag) ++occurrences[entry.key];
  }
  std::vector<int64_t> admitted;
  for (const auto& [key, n] : occurrences) {
    if (!rows_.contains(key) && pending_[key] + n >= vocabulary_.min_count) admitted.push_back(key);
  }
  // Evict to make room: the smallest unpinned keys (this lookup's keys are pinned).
  const auto excess = static_cast<int64_t>(rows_.size() + admitted.size()) - vocabulary_.capacity;
  if (excess > 0) {
    if (vocabulary_.when_full == WhenFull::kError) throw std::runtime_error("full");
    std::set<std::tuple<int64_t, int64_t, int64_t>> order;
    for (const auto& [key, row] : rows_) {
      if (occurrences.contains(key)) continue;
      order.insert(vocabulary_.when_full == WhenFull::kEvictLeastRecent
                       ? std::tuple(row.last_seen, row.count, key)
                       : std::tuple(row.count, row.last_seen, key));
    }
    if (static_cast<int64_t>(order.size()) < excess) throw std::runtime_error("pinned");
    auto it = order.begin();
    for (int64_t i = 0; i < excess; ++i, ++it) {
      rows_.erase(std::get<2>(*it));
      ++evicted_;
    }
  }
  for (const auto& [key, n] : occurrences) {
    const auto found = rows_.find(key);
    if (found != rows_.end()) {
      found->second.last_seen = step;
      found->second.count += n;
    } else if (pending_[key] + n >= vocabulary_.min_count) {
      Row row{.values = initial_row_(key),
              .accumulator = std::vector<double>(static_cast<size_t>(dim_), initial_accumulator_),
              .last_seen = step,
              .count = pending_[key] + n};
      rows_.emplace(key, std::move(row));
      pending_.erase(key);
      ++inserted_;
    } else {
      pending_[key] += n;
      not_admitted_ += n;
    }
  }
  return lookup(bags);
}

void ReferenceDynamicTable::apply(const std::vector<Bag>& bags,
                                  const std::vector<std::vector<double>>& gradients) {
  std::map<int64_t, std::vector<double>> sums;
  for (size_t b = 0; b < bags.size(); ++b) {
    for (size_t j = 0; j < bags[b].size(); ++j) {
      const int64_t key = bags[b][j].key;
      if (!rows_.contains(key)) continue;  // no row, no update
      std::vector<double>& sum = sums[key];
      sum.resize(static_cast<size_t>(dim_), 0.0);
      for (int64_t d = 0; d < dim_; ++d) {
        sum[static_cast<size_t>(d)] += gain(bags[b], j) * gradients[b][static_cast<size_t>(d)];
      }
    }
  }
  for (const auto& [key, g] : sums) {
    Row& row = rows_.at(key);
    for (int64_t d = 0; d < dim_; ++d) {
      const auto i = static_cast<size_t>(d);
      if (optimizer_ == Optimizer::kSgd) {
        row.values[i] -= learning_rate_ * g[i];
      } else {
        row.accumulator[i] += g[i] * g[i];
        row.values[i] -= learning_rate_ * g[i] / std::sqrt(row.accumulator[i]);
      }
    }
  }
  ++step_;
  if (vocabulary_.ttl_steps) {
    const int64_t before = step_ - *vocabulary_.ttl_steps + 1;
    for (auto it = rows_.begin(); it != rows_.end();) {
      if (it->second.last_seen < before) {
        it = rows_.erase(it);
        ++evicted_;
      } else {
        ++it;
      }
    }
  }
}

}  // namespace recemb::reference

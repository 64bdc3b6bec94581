// An independent float64 model of one dynamic table (docs/semantics.md, "Dynamic vocabularies"),
// for tests: a std::map from key to row, written from the specification, never from src/.
//
// One table, its features' bags given as explicit (key, weight) lists; the combiner's gains as in
// reference_embedding.h; SGD or Adagrad; admission by exact counts (min_count); TTL; eviction when
// full by (last_seen, count, key) or (count, last_seen, key). One training lookup is applied
// before the next (no pipelining), so the only pinned keys are the lookup's own.
#ifndef RECEMB_TESTS_REFERENCE_REFERENCE_DYNAMIC_TABLE_H_
#define RECEMB_TESTS_REFERENCE_REFERENCE_DYNAMIC_TABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "recemb/combiner.h"
#include "recemb/config.h"

namespace recemb::reference {

class ReferenceDynamicTable {
 public:
  struct Entry {
    int64_t key;
    double weight;
  };
  using Bag = std::vector<Entry>;
  // The initial row of a key (the library's initializer, computed from (seed, key)).
  using InitialRow = std::function<std::vector<double>(int64_t key)>;
  enum class Optimizer { kSgd, kAdagrad };

  ReferenceDynamicTable(int64_t dim, DynamicVocabulary vocabulary, Combiner combiner,
                        Optimizer optimizer, double learning_rate, double initial_accumulator,
                        InitialRow initial_row);

  // A pure lookup: one activation (dim values) per bag.
  std::vector<std::vector<double>> lookup(const std::vector<Bag>& bags) const;
  // A training lookup for the next step (admits, counts, evicts), then its activations.
  std::vector<std::vector<double>> train_lookup(const std::vector<Bag>& bags);
  // Applies d(loss)/d(activation) per bag of the last training lookup; then TTL.
  void apply(const std::vector<Bag>& bags, const std::vector<std::vector<double>>& gradients);

  struct Row {
    std::vector<double> values;
    std::vector<double> accumulator;  // Adagrad
    int64_t last_seen = 0;
    int64_t count = 0;
  };
  const std::map<int64_t, Row>& rows() const { return rows_; }
  int64_t inserted() const { return inserted_; }
  int64_t evicted() const { return evicted_; }
  int64_t not_admitted_lookups() const { return not_admitted_; }
  int64_t step() const { return step_; }

 private:
  double gain(const Bag& bag, size_t j) const;

  int64_t dim_;
  DynamicVocabulary vocabulary_;
  Combiner combiner_;
  Optimizer optimizer_;
  double learning_rate_;
  double initial_accumulator_;
  InitialRow initial_row_;
  std::map<int64_t, Row> rows_;
  std::map<int64_t, int64_t> pending_;
  int64_t step_ = 0;
  int64_t inserted_ = 0;
  int64_t evicted_ = 0;
  int64_t not_admitted_ = 0;
};

}  // namespace recemb::reference

#endif  // RECEMB_TESTS_REFERENCE_REFERENCE_DYNAMIC_TABLE_H_

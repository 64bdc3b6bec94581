// A synthetic Criteo-like click data set with a planted signal: the trainer's data when no Criteo
// file is given. Examples look like Criteo's after the reader's transforms (13 log-transformed
// counts, 26 categorical ids with Zipf-skewed frequencies over tables of the given sizes), and
// their labels follow a known logistic model, so a run shows whether the model learns and how far
// it is from the best possible score.
//
// The model, for a data set with seed S (docs/training.md ("Training data") has the rationale):
//   dense j (I1..I13):       c ~ Geometric on {0, 1, ...} with mean mu_j (kDenseMeans), value
//                            x_j = dense_value(c) = log(1 + c)
//   categorical f (C1..C26): rank r ~ Zipf(vocabulary_f, zipf_alpha); id = (a_f * (r - 1) + b_f)
//                            mod vocabulary_f, a fixed permutation (a_f coprime to vocabulary_f)
//                            that scatters the hot ids over the table
//   logit z = kBias + sum_j w_j * (x_j - E[x_j])
//                   + sum over the signal features f (carries_signal: C1, C3, ..., C25) of
//                     (u_f(id_f) - E[u_f])
//   label ~ Bernoulli(sigmoid(z))
// with w_j uniform in [-kDenseWeight, kDenseWeight] and u_f(id) uniform in
// [-kCategoricalWeight, kCategoricalWeight], each a hash of (S, feature, id). The means E[x_j]
// (exact) and E[u_f] (over the kMeanRanks most frequent ids; the rest count as 0) are subtracted so
// that z is centred on kBias whatever the seed and the table sizes: the click rate is about 0.25
// and the Bayes-optimal AUC (that of z itself) about 0.78, for any seed and preset (the tests
// measure both).
//
// An open vocabulary (SyntheticOptions::ids = CategoricalIds::kRawKeys, the data of a dynamic-
// vocabulary run): the ids above become slots, each held by a succession of items, and the batch
// holds the items' keys. At moment t (the example's index, or vocabulary_time when set), slot p of
// feature f holds item n = p + vocabulary_f * g of generation
//   g = floor((t + phase_f(p)) / item_lifetime),   phase_f(p) in [0, item_lifetime) a hash of
//                                                  (S, f, p), so that the slots turn over at
//                                                  staggered moments,
// and its key is n scrambled by a bijection of the 64-bit integers (times an odd constant, xor a
// salt of (S, f)): any int64, distinct for distinct items. An item's planted weight is its slot's,
// u_f(p), so the examples (labels, dense features, slots) are exactly those of kHashedRows and the
// planted model the same; only the keys carrying them appear, live item_lifetime examples and
// vanish, as new ads and users do, so that a dynamic table admits new keys and evicts stale ones.
//
// Randomness is counter-based: example i is a pure function of (seed, split, i), drawn from a
// SplitMix64 stream keyed by them, so position() is the example index, seek() is O(1), and two
// generators with the same options produce the same examples. The planted model depends on the
// seed only: the kTrain and kEval splits are disjoint samples of the same model.
#ifndef RECEMB_TRAIN_DATA_SYNTHETIC_CRITEO_H_
#define RECEMB_TRAIN_DATA_SYNTHETIC_CRITEO_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlrm/example_batch.h"
#include "train/data/zipf_sampler.h"

namespace recemb::train {

enum class SyntheticSplit {
  kTrain,  // the training examples
  kEval,   // held-out examples of the same planted model (a different random stream)
};

struct SyntheticOptions {
  uint64_t seed = 0;  // the planted model and the examples
  // 26 table sizes >= 1 (required), e.g. preset_vocabulary_sizes("small").
  std::vector<int64_t> vocabulary_sizes = {};
  double zipf_alpha = 1.05;  // Zipf exponent of every feature's id frequencies, finite and > 0
  SyntheticSplit split = SyntheticSplit::kTrain;
  // Examples before the source is exhausted; unset: endless (the trainer stops after its steps).
  std::optional<int64_t> num_examples = {};
  // kHashedRows: ids in [0, vocabulary_sizes[f]); kRawKeys: the keys of an open vocabulary
  // (above), vocabulary_sizes[f] items of feature f live at any moment.
  dlrm::CategoricalIds ids = dlrm::CategoricalIds::kHashedRows;
  // kRawKeys: examples an item holds its slot before a new item takes it over (>= 1).
  int64_t item_lifetime = int64_t{1} << 20;
};

class SyntheticCriteo final : public dlrm::ExampleSource {
 public:
  // Mean of the geometric count behind I1..I13 (of the order of Criteo Kaggle's).
  static constexpr std::array<double, dlrm::kNumDenseFeatures> kDenseMeans = {
      3.5, 100.0, 25.0, 7.0, 20000.0, 100.0, 15.0, 12.0, 100.0, 0.6, 2.5, 1.0, 8.0};
  static constexpr double kBias = -1.4;
  static constexpr double kDenseWeight = 0.25;
  static constexpr double kCategoricalWeight = 0.55;
  static constexpr int64_t kMeanRanks = 1 << 16;
  // Whether u_f enters the logit: C1, C3, ..., C25 (0-based feature f even).
  static constexpr bool carries_signal(int feature) { return feature % 2 == 0; }

  // Validates the options (InvalidArgument naming the field and value: vocabulary_sizes, a
  // zipf_alpha not finite and > 0, num_examples < 0) and derives the planted model.
  explicit SyntheticCriteo(SyntheticOptions options);

  // ExampleSource. next() draws examples position() .. position() + max_examples - 1 (fewer at
  // num_examples). Allocates only to grow `batch`.
  int64_t next(dlrm::ExampleBatch& batch, int64_t max_examples) override;
  // "synthetic:<index of the next example>".
  std::string position() const override;
  // Accepts "synthetic:<index>" with 0 <= index <= num_examples (if set).
  void seek(std::string_view position) override;

  // kRawKeys: the moment whose items the examples' keys are. Unset (the default): each example's
  // own index, a stream whose vocabulary drifts; set (>= 0, else InvalidArgument): that moment for
  // every example, as a held-out set is seen at one time of the training.
  void set_vocabulary_time(std::optional<int64_t> time);

  // The planted logit z of example `example` of `batch` (a batch this generator filled): the label
  // was drawn as Bernoulli(sigmoid(z)). Scoring examples by it gives the Bayes-optimal AUC and log
  // loss, the ceiling of what a model can reach on these data.
  double logit(const dlrm::ExampleBatch& batch, int64_t example) const;

  const SyntheticOptions& options() const { return options_; }

 private:
  struct Feature {
    ZipfSampler ranks;
    int64_t multiplier;   // a_f: coprime to the vocabulary size
    int64_t offset;       // b_f
    uint64_t weight_key;  // u_f(id) is a hash of weight_key and id
    double weight_mean;   // E[u_f]
    uint64_t item_salt;   // kRawKeys: the keys' salt and the slots' phases
  };

  // (a_f * (rank - 1) + b_f) mod vocabulary_f
  static int64_t id_of_rank(const Feature& feature, int64_t rank);
  // kRawKeys: the key of the item in slot `slot` at moment `time`, and the slot of a key.
  int64_t key_of_slot(const Feature& feature, int64_t slot, int64_t time) const;
  static int64_t slot_of_key(const Feature& feature, int64_t key);
  // z of the example whose 13 dense values start at `dense` and whose id of feature f is
  // ids[f * stride].
  double logit(const float* dense, const int64_t* ids, size_t stride) const;

  SyntheticOptions options_;
  uint64_t stream_key_;  // seed and split: the key of every example's random stream
  std::array<double, dlrm::kNumDenseFeatures> dense_weights_;
  std::array<double, dlrm::kNumDenseFeatures> dense_means_;  // E[x_j]
  // log(1 - p_j), p_j = 1 / (1 + mu_j): the geometric draws' divisor.
  std::array<double, dlrm::kNumDenseFeatures> log_continue_;
  std::vector<Feature> features_;
  int64_t index_ = 0;  // of the next example
  std::optional<int64_t> vocabulary_time_;
};

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_DATA_SYNTHETIC_CRITEO_H_

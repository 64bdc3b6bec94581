// Evaluation metrics of a click model over (probability, label) pairs: log loss and ROC AUC,
// either over one batch (the free functions) or accumulated over many batches (BinaryMetrics,
// as an evaluation over a held-out part runs batch by batch).
//
// Definitions, over n examples with probabilities p_i in [0, 1] and labels y_i in {0, 1}:
//   log loss = (1 / n) sum_i -(y_i log q_i + (1 - y_i) log(1 - q_i)),
//              q_i = clamp(p_i, 1e-7, 1 - 1e-7)   (kProbabilityClamp; Keras' epsilon), so that a
//              confident wrong prediction costs at most -log(1e-7) = 16.1, not infinity.
//   ROC AUC  = (1 / (P N)) sum over positive i, negative j of [p_i > p_j] + [p_i == p_j] / 2,
//              P positives and N negatives: the probability that a random positive scores above
//              a random negative, ties counting half (the Mann-Whitney U statistic). Exact,
//              computed from average ranks after one sort, O(n log n).
// Both are computed in double. Undefined values are NaN: the log loss of no examples, the AUC
// when there are no positives or no negatives.
#ifndef RECEMB_TRAIN_REPORT_METRICS_H_
#define RECEMB_TRAIN_REPORT_METRICS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace recemb::train {

inline constexpr double kProbabilityClamp = 1e-7;

// The metrics of one set of examples: probabilities and labels of the same size. Throws
// InvalidArgument naming the array, the index and the value when the sizes differ, a label is not
// 0 or 1, or a probability is not in [0, 1] (NaN included).
double log_loss(std::span<const float> probabilities, std::span<const float> labels);
double roc_auc(std::span<const float> probabilities, std::span<const float> labels);

// Accumulates examples batch by batch; the metrics of everything added so far equal those of the
// free functions over the concatenation. Keeps every (probability, label) pair (8 bytes per
// example) for the exact AUC.
class BinaryMetrics {
 public:
  // Adds a batch. Validates it as the free functions do (InvalidArgument; nothing is added).
  void add(std::span<const float> probabilities, std::span<const float> labels);

  int64_t num_examples() const { return static_cast<int64_t>(examples_.size()); }
  int64_t num_positives() const { return num_positives_; }
  double log_loss() const;
  // Sorts a copy of the examples: O(n log n) time, 8 n bytes.
  double roc_auc() const;

  // Forgets every example.
  void clear();

 private:
  struct Example {
    float probability;
    bool positive;
  };

  std::vector<Example> examples_;
  int64_t num_positives_ = 0;
  double log_loss_sum_ = 0.0;
};

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_REPORT_METRICS_H_

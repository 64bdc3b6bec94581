#include "train/report/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "recemb/error.h"

#include "support/number_text.h"

namespace recemb::train {
namespace {

void validate(std::span<const float> probabilities, std::span<const float> labels,
              const char* caller) {
  if (probabilities.size() != labels.size()) {
    throw InvalidArgument(std::string(caller) + ": " + std::to_string(probabilities.size()) +
                          " probabilities but " + std::to_string(labels.size()) + " labels");
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != 0.0f && labels[i] != 1.0f) {
      throw InvalidArgument(std::string(caller) + ": labels[" + std::to_string(i) +
                            "] = " + support::float_text(labels[i]) + " is not 0 or 1");
    }
    if (!(probabilities[i] >= 0.0f && probabilities[i] <= 1.0f)) {
      throw InvalidArgument(std::string(caller) + ": probabilities[" + std::to_string(i) +
                            "] = " + support::float_text(probabilities[i]) + " is not in [0, 1]");
    }
  }
}

double log_loss_sum(std::span<const float> probabilities, std::span<const float> labels) {
  double sum = 0.0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const double q = std::clamp(static_cast<double>(probabilities[i]), kProbabilityClamp,
                                1.0 - kProbabilityClamp);
    sum -= labels[i] == 1.0f ? std::log(q) : std::log1p(-q);
  }
  return sum;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

double log_loss(std::span<const float> probabilities, std::span<const float> labels) {
  validate(probabilities, labels, "log_loss");
  return labels.empty() ? kNaN
                        : log_loss_sum(probabilities, labels) / static_cast<double>(labels.size());
}

double roc_auc(std::span<const float> probabilities, std::span<const float> labels) {
  BinaryMetrics metrics;
  metrics.add(probabilities, labels);
  return metrics.roc_auc();
}

void BinaryMetrics::add(std::span<const float> probabilities, std::span<const float> labels) {
  validate(probabilities, labels, "BinaryMetrics::add");
  log_loss_sum_ += log_loss_sum(probabilities, labels);
  for (size_t i = 0; i < labels.size(); ++i) {
    const bool positive = labels[i] == 1.0f;
    examples_.push_back({.probability = probabilities[i], .positive = positive});
    num_positives_ += positive ? 1 : 0;
  }
}

double BinaryMetrics::log_loss() const {
  return examples_.empty() ? kNaN : log_loss_sum_ / static_cast<double>(examples_.size());
}

// With examples sorted by probability, a group of tied examples occupying the 1-based ranks
// first + 1 .. last shares the average rank (first + 1 + last) / 2. The positives' rank sum R
// gives U = R - P (P + 1) / 2 and AUC = U / (P N). Twice the ranks are integers, so R is summed
// exactly in int64 (2 R < 2 n^2 fits for n < 2^31).
double BinaryMetrics::roc_auc() const {
  const int64_t num_negatives = num_examples() - num_positives_;
  if (num_positives_ == 0 || num_negatives == 0) return kNaN;
  std::vector<Example> sorted = examples_;
  std::sort(sorted.begin(), sorted.end(),
            [](const Example& a, const Example& b) { return a.probability < b.probability; });
  int64_t twice_rank_sum = 0;
  for (size_t first = 0; first < sorted.size();) {
    size_t last = first;
    int64_t group_positives = 0;
    while (last < sorted.size() && sorted[last].probability == sorted[first].probability) {
      group_positives += sorted[last].positive ? 1 : 0;
      ++last;
    }
    twice_rank_sum += group_positives * static_cast<int64_t>(first + 1 + last);
    first = last;
  }
  const double u =
      static_cast<double>(twice_rank_sum - num_positives_ * (num_positives_ + 1)) / 2.0;
  return u / (static_cast<double>(num_positives_) * static_cast<double>(num_negatives));
}

void BinaryMetrics::clear() {
  examples_.clear();
  num_positives_ = 0;
  log_loss_sum_ = 0.0;
}

}  // namespace recemb::train

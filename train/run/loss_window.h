// The training loss of the steps since the last train record (train.log_every, metrics.jsonl): the
// mean of their losses. A checkpoint saves the window (sum and count), so that a resumed run
// records what the uninterrupted one does.
#ifndef RECEMB_TRAIN_RUN_LOSS_WINDOW_H_
#define RECEMB_TRAIN_RUN_LOSS_WINDOW_H_

#include <cmath>
#include <cstdint>

namespace recemb::train {

class LossWindow {
 public:
  // A step's loss (the mean over its global batch).
  void add(double step_loss) {
    sum_ += step_loss;
    ++count_;
    recent_ = sum_ / static_cast<double>(count_);
  }
  bool empty() const { return count_ == 0; }
  // The window's mean, kept after take() for the progress line until the next step (NaN before
  // the first step).
  double recent() const { return recent_; }
  // Ends the window: its mean (recent()); the next step starts a new one.
  double take() {
    sum_ = 0;
    count_ = 0;
    return recent_;
  }

  // What a checkpoint saves, and a resumed run restores.
  double sum() const { return sum_; }
  int64_t count() const { return count_; }
  void restore(double sum, int64_t count) {
    sum_ = sum;
    count_ = count;
    recent_ = count > 0 ? sum / static_cast<double>(count) : std::nan("");
  }

 private:
  double sum_ = 0;
  int64_t count_ = 0;
  double recent_ = std::nan("");
};

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_RUN_LOSS_WINDOW_H_

// The progress display of `recemb train`: one line with a bar, steps, examples/s, loss and ETA,
// redrawn in place on a terminal and printed every few seconds otherwise (logs, CI).
//
//   [##########----------]  1000/2000 steps   412.3k ex/s   loss 0.4521   ETA 0:02
#ifndef RECEMB_TRAIN_REPORT_PROGRESS_H_
#define RECEMB_TRAIN_REPORT_PROGRESS_H_

#include <cstdint>
#include <ostream>
#include <string>

namespace recemb::train {

struct ProgressLine {
  int64_t step = 0;         // steps done
  int64_t total_steps = 0;  // >= 1
  double examples_per_second = 0;
  double loss = 0;         // recent training loss
  double eta_seconds = 0;  // negative: unknown
};

// The line above, without a line ending.
std::string format_progress(const ProgressLine& line);

enum class ProgressMode {
  kRedraw,  // terminal: rewrite the line with '\r' at most 10 times a second
  kLines,   // pipe or file: a full line at most every `interval_seconds`
};

class ProgressDisplay {
 public:
  ProgressDisplay(std::ostream& out, ProgressMode mode, double interval_seconds = 5.0);
  // Shows `line` if enough time passed since the last display (always for the last step).
  // `elapsed_seconds` comes from the caller's clock (monotonic).
  void update(const ProgressLine& line, double elapsed_seconds);
  // Prints `text` on a line of its own (clearing a redrawn bar first; the bar reappears with the
  // next update).
  void message(const std::string& text);

 private:
  std::ostream& out_;
  ProgressMode mode_;
  double interval_seconds_;
  double last_shown_ = -1e300;
  bool bar_on_screen_ = false;
};

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_REPORT_PROGRESS_H_

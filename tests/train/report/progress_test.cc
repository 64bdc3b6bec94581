#include "train/report/progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sstream>

namespace recemb::train {
namespace {

using ::testing::HasSubstr;

TEST(Progress, LineShowsBarCountsRateLossAndEta) {
  EXPECT_EQ(format_progress({.step = 500,
                             .total_steps = 2000,
                             .examples_per_second = 412345,
                             .loss = 0.45214,
                             .eta_seconds = 125}),
            "[#####---------------]  500/2000 steps    412.3k ex/s  loss 0.4521  ETA 2:05");
  EXPECT_EQ(format_progress({.step = 3,
                             .total_steps = 3,
                             .examples_per_second = 2.5e6,
                             .loss = 1,
                             .eta_seconds = 3725}),
            "[####################] 3/3 steps     2.50M ex/s  loss 1.0000  ETA 1:02:05");
  EXPECT_THAT(format_progress({.step = 0, .total_steps = 10, .eta_seconds = -1}),
              HasSubstr("ETA ?"));
}

TEST(Progress, LinesModePrintsAtMostEveryIntervalAndAlwaysTheLastStep) {
  std::ostringstream out;
  ProgressDisplay display(out, ProgressMode::kLines, 5.0);
  for (int step = 1; step <= 10; ++step) {
    display.update({.step = step, .total_steps = 10}, /*elapsed_seconds=*/step * 1.5);
  }
  // Shown at 1.5 s (first), 7.5 s and 13.5 s (>= 5 s apart), and at step 10 (the last).
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  EXPECT_THAT(text, HasSubstr(" 1/10 steps"));
  EXPECT_THAT(text, HasSubstr(" 5/10 steps"));
  EXPECT_THAT(text, HasSubstr(" 9/10 steps"));
  EXPECT_THAT(text, HasSubstr("10/10 steps"));
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST(Progress, RedrawModeRewritesInPlaceAndClearsForMessages) {
  std::ostringstream out;
  ProgressDisplay display(out, ProgressMode::kRedraw);
  display.update({.step = 1, .total_steps = 2}, 0.0);
  display.message("eval: auc 0.7");
  display.update({.step = 2, .total_steps = 2}, 0.01);
  const std::string text = out.str();
  EXPECT_EQ(text.rfind('\r', 0), 0u);
  EXPECT_THAT(text, HasSubstr("\r\x1b[Keval: auc 0.7\n"));
  EXPECT_EQ(text.back(), '\n');  // the finished bar stays, followed by a newline
}

}  // namespace
}  // namespace recemb::train

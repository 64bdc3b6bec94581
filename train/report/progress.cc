#include "train/report/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace recemb::train {
namespace {

constexpr int kBarWidth = 20;

std::string duration(double seconds) {
  if (!(seconds >= 0)) return "?";
  const long total = std::lround(seconds);
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  } else {
    std::snprintf(text, sizeof text, "%ld:%02ld", total / 60, total % 60);
  }
  return text;
}

std::string rate(double per_second) {
  char text[32];
  if (per_second >= 1e6) {
    std::snprintf(text, sizeof text, "%.2fM", per_second / 1e6);
  } else if (per_second >= 1e3) {
    std::snprintf(text, sizeof text, "%.1fk", per_second / 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.0f", per_second);
  }
  return text;
}

}  // namespace

std::string format_progress(const ProgressLine& line) {
  const double fraction =
      std::clamp(static_cast<double>(line.step) / static_cast<double>(line.total_steps), 0.0, 1.0);
  const int filled = static_cast<int>(fraction * kBarWidth);
  std::string bar = "[" + std::string(filled, '#') + std::string(kBarWidth - filled, '-') + "]";
  char text[160];
  std::snprintf(text, sizeof text, "%s %*lld/%lld steps  %8s ex/s  loss %.4f  ETA %s", bar.c_str(),
                static_cast<int>(std::to_string(line.total_steps).size()),
                static_cast<long long>(line.step), static_cast<long long>(line.total_steps),
                rate(line.examples_per_second).c_str(), line.loss,
                duration(line.eta_seconds).c_str());
  return text;
}

ProgressDisplay::ProgressDisplay(std::ostream& out, ProgressMode mode, double interval_seconds)
    : out_(out),
      mode_(mode),
      interval_seconds_(mode == ProgressMode::kRedraw ? 0.1 : interval_seconds) {}

void ProgressDisplay::update(const ProgressLine& line, double elapsed_seconds) {
  const bool last = line.step >= line.total_steps;
  if (!last && elapsed_seconds - last_shown_ < interval_seconds_) return;
  last_shown_ = elapsed_seconds;
  if (mode_ == ProgressMode::kRedraw) {
    out_ << '\r' << format_progress(line) << "\x1b[K" << (last ? "\n" : "") << std::flush;
    bar_on_screen_ = !last;
  } else {
    out_ << format_progress(line) << '\n' << std::flush;
  }
}

void ProgressDisplay::message(const std::string& text) {
  if (bar_on_screen_) out_ << "\r\x1b[K";
  bar_on_screen_ = false;
  out_ << text << '\n' << std::flush;
}

}  // namespace recemb::train

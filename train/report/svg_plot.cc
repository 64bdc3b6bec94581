#include "train/report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace recemb::train {
namespace {

constexpr double kMarginLeft = 70, kMarginRight = 20, kMarginTop = 34, kMarginBottom = 46;

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

std::string coordinate(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

struct Range {
  double low = std::numeric_limits<double>::infinity();
  double high = -std::numeric_limits<double>::infinity();
  bool empty() const { return !(low <= high); }
};

// Tick step 1, 2 or 5 x 10^k giving about five ticks over [low, high]; the range is widened to
// whole steps (and a degenerate range to one step around its value).
double nice_step(Range& range) {
  if (range.high - range.low <= 0) {
    const double pad = range.low == 0 ? 1 : std::abs(range.low) * 0.1;
    range.low -= pad;
    range.high += pad;
  }
  const double raw = (range.high - range.low) / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  double step = 10 * magnitude;
  for (double factor : {1.0, 2.0, 5.0}) {
    if (factor * magnitude >= raw) {
      step = factor * magnitude;
      break;
    }
  }
  range.low = std::floor(range.low / step) * step;
  range.high = std::ceil(range.high / step) * step;
  return step;
}

void render_chart(const Chart& chart, double top, const PlotLayout& layout, std::string& svg) {
  const double left = kMarginLeft, right = layout.width - kMarginRight;
  const double plot_top = top + kMarginTop, plot_bottom = top + layout.chart_height - kMarginBottom;
  svg += "<text x=\"" + coordinate(layout.width / 2.0) + "\" y=\"" + coordinate(top + 20) +
         "\" text-anchor=\"middle\" font-weight=\"bold\">" + escape(chart.title) + "</text>\n";
  svg += "<rect x=\"" + coordinate(left) + "\" y=\"" + coordinate(plot_top) + "\" width=\"" +
         coordinate(right - left) + "\" height=\"" + coordinate(plot_bottom - plot_top) +
         "\" fill=\"none\" stroke=\"#888\"/>\n";
  svg += "<text x=\"" + coordinate((left + right) / 2) + "\" y=\"" + coordinate(plot_bottom + 36) +
         "\" text-anchor=\"middle\">" + escape(chart.x_label) + "</text>\n";
  svg += "<text transform=\"translate(16 " + coordinate((plot_top + plot_bottom) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escape(chart.y_label) + "</text>\n";

  Range x_range, y_range;
  for (const Series& series : chart.series) {
    for (size_t i = 0; i < std::min(series.x.size(), series.y.size()); ++i) {
      if (!std::isfinite(series.x[i]) || !std::isfinite(series.y[i])) continue;
      x_range.low = std::min(x_range.low, series.x[i]);
      x_range.high = std::max(x_range.high, series.x[i]);
      y_range.low = std::min(y_range.low, series.y[i]);
      y_range.high = std::max(y_range.high, series.y[i]);
    }
  }
  if (x_range.empty()) {
    svg += "<text x=\"" + coordinate((left + right) / 2) + "\" y=\"" +
           coordinate((plot_top + plot_bottom) / 2) + "\" text-anchor=\"middle\">no data</text>\n";
    return;
  }
  const double x_step = nice_step(x_range), y_step = nice_step(y_range);
  auto to_x = [&](double x) {
    return left + (x - x_range.low) / (x_range.high - x_range.low) * (right - left);
  };
  auto to_y = [&](double y) {
    return plot_bottom -
           (y - y_range.low) / (y_range.high - y_range.low) * (plot_bottom - plot_top);
  };
  // Ticks are counted, not accumulated in floating point, so the last one is not lost to rounding.
  const long x_ticks = std::lround((x_range.high - x_range.low) / x_step);
  for (long i = 0; i <= x_ticks; ++i) {
    const double x = x_range.low + static_cast<double>(i) * x_step;
    svg += "<text x=\"" + coordinate(to_x(x)) + "\" y=\"" + coordinate(plot_bottom + 16) +
           "\" text-anchor=\"middle\" font-size=\"11\">" + number(x) + "</text>\n";
  }
  const long y_ticks = std::lround((y_range.high - y_range.low) / y_step);
  for (long i = 0; i <= y_ticks; ++i) {
    const double y = y_range.low + static_cast<double>(i) * y_step;
    svg += "<line x1=\"" + coordinate(left) + "\" y1=\"" + coordinate(to_y(y)) + "\" x2=\"" +
           coordinate(right) + "\" y2=\"" + coordinate(to_y(y)) + "\" stroke=\"#eee\"/>\n";
    svg += "<text x=\"" + coordinate(left - 6) + "\" y=\"" + coordinate(to_y(y) + 4) +
           "\" text-anchor=\"end\" font-size=\"11\">" + number(y) + "</text>\n";
  }
  double legend_y = plot_top + 16;
  for (const Series& series : chart.series) {
    std::string points, markers;
    for (size_t i = 0; i < std::min(series.x.size(), series.y.size()); ++i) {
      if (!std::isfinite(series.x[i]) || !std::isfinite(series.y[i])) continue;
      if (!points.empty()) points += ' ';
      points += coordinate(to_x(series.x[i]));
      points += ',';
      points += coordinate(to_y(series.y[i]));
      if (series.markers) {
        markers += "<circle cx=\"" + coordinate(to_x(series.x[i])) + "\" cy=\"" +
                   coordinate(to_y(series.y[i])) + "\" r=\"3\" fill=\"" + escape(series.color) +
                   "\"/>\n";
      }
    }
    svg += "<polyline fill=\"none\" stroke=\"" + escape(series.color) +
           "\" stroke-width=\"1.5\" points=\"" + points + "\"/>\n" + markers;
    svg += "<text x=\"" + coordinate(right - 8) + "\" y=\"" + coordinate(legend_y) +
           "\" text-anchor=\"end\" font-size=\"12\" fill=\"" + escape(series.color) + "\">" +
           escape(series.label) + "</text>\n";
    legend_y += 16;
  }
}

}  // namespace

std::string render_svg(std::span<const Chart> charts, const PlotLayout& layout) {
  const int height = layout.chart_height * static_cast<int>(std::max<size_t>(charts.size(), 1));
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    std::to_string(layout.width) + "\" height=\"" + std::to_string(height) +
                    "\" font-family=\"sans-serif\" font-size=\"13\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (size_t i = 0; i < charts.size(); ++i) {
    render_chart(charts[i], static_cast<double>(i) * layout.chart_height, layout, svg);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace recemb::train

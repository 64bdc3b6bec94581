// Line charts as a standalone SVG document (no plotting dependency): the training-loss and
// eval-AUC curves `recemb train` writes beside its metrics.
#ifndef RECEMB_TRAIN_REPORT_SVG_PLOT_H_
#define RECEMB_TRAIN_REPORT_SVG_PLOT_H_

#include <span>
#include <string>
#include <vector>

namespace recemb::train {

struct Series {
  std::string label = {};
  std::vector<double> x = {};  // same length as y; non-finite points are left out
  std::vector<double> y = {};
  std::string color = "#1f77b4";  // any SVG color
  bool markers = false;           // a dot at each point (e.g. the evaluations), besides the line
};

struct Chart {
  std::string title = {};
  std::string x_label = {};
  std::string y_label = {};
  std::vector<Series> series = {};
};

struct PlotLayout {
  int width = 800;         // pixels of the whole document
  int chart_height = 320;  // pixels per chart; charts are stacked vertically
};

// The charts as one SVG document: per chart a frame, axes with about five "nice" ticks (1, 2 or
// 5 times a power of ten) spanning the data, a polyline per series (with a circle at each point
// for a series with markers) and a legend. A chart without
// finite points shows "no data". Text is XML-escaped.
std::string render_svg(std::span<const Chart> charts, const PlotLayout& layout = {});

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_REPORT_SVG_PLOT_H_

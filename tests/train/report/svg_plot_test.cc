#include "train/report/svg_plot.h"

#include <cmath>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <regex>
#include <string>
#include <vector>

namespace recemb::train {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Point {
  double x, y;
};

// The points of every polyline, in document order.
std::vector<std::vector<Point>> polylines(const std::string& svg) {
  std::vector<std::vector<Point>> lines;
  const std::regex polyline("points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), polyline);
       it != std::sregex_iterator(); ++it) {
    std::vector<Point> points;
    const std::string text = (*it)[1];
    const std::regex pair("([-0-9.]+),([-0-9.]+)");
    for (auto p = std::sregex_iterator(text.begin(), text.end(), pair); p != std::sregex_iterator();
         ++p) {
      points.push_back({std::stod((*p)[1]), std::stod((*p)[2])});
    }
    lines.push_back(points);
  }
  return lines;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(SvgPlot, PointsMapLinearlyIntoTheFrameWithNiceTicks) {
  const Chart chart{
      .title = "eval AUC",
      .x_label = "step",
      .y_label = "AUC",
      .series = {{.label = "auc", .x = {0, 100, 200, 300}, .y = {0.5, 0.62, 0.71, 0.8}}}};
  const PlotLayout layout{.width = 800, .chart_height = 300};
  const std::string svg = render_svg(std::span(&chart, 1), layout);
  ASSERT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
  for (const char* tick : {">0.5<", ">0.6<", ">0.7<", ">0.8<", ">0<", ">100<", ">300<"}) {
    EXPECT_THAT(svg, HasSubstr(tick)) << tick;
  }
  const auto lines = polylines(svg);
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_EQ(lines[0].size(), 4u);
  // Frame: x from 70 to 780, y from 34 (top) to 254 (bottom); data ranges [0,300] x [0.5,0.8].
  for (size_t i = 0; i < 4; ++i) {
    const double x = chart.series[0].x[i], y = chart.series[0].y[i];
    EXPECT_NEAR(lines[0][i].x, 70 + x / 300 * 710, 0.06) << i;
    EXPECT_NEAR(lines[0][i].y, 254 - (y - 0.5) / 0.3 * 220, 0.06) << i;
  }
}

TEST(SvgPlot, ChartsStackAndSkipNonFinitePoints) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Chart> charts{
      {.title = "loss", .series = {{.label = "train", .x = {1, 2, 3}, .y = {0.7, nan, 0.5}}}},
      {.title = "auc", .series = {{.label = "eval", .x = {1, 2}, .y = {0.6, 0.6}}}}};
  const std::string svg = render_svg(charts, {.width = 400, .chart_height = 200});
  EXPECT_THAT(svg, HasSubstr("height=\"400\""));
  const auto lines = polylines(svg);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].size(), 2u);
  ASSERT_EQ(lines[1].size(), 2u);
  for (const Point& p : lines[1]) {  // the second chart lies in the lower half
    EXPECT_GT(p.y, 200);
    EXPECT_LT(p.y, 400);
  }
  // A constant series gets a widened range: both points at the same height, inside the frame.
  EXPECT_DOUBLE_EQ(lines[1][0].y, lines[1][1].y);
}

TEST(SvgPlot, EmptyChartsSayNoDataAndTextIsEscaped) {
  const Chart chart{.title = "a<b & \"c\"", .series = {{.label = "x>y"}}};
  const std::string svg = render_svg(std::span(&chart, 1));
  EXPECT_THAT(svg, HasSubstr("no data"));
  EXPECT_THAT(svg, HasSubstr("a&lt;b &amp; &quot;c&quot;"));
  EXPECT_THAT(svg, Not(HasSubstr("a<b")));
  EXPECT_TRUE(polylines(svg).empty());
}

// A series with markers gets a circle at each finite point, in its color; one without, none.
TEST(SvgPlot, MarkersDrawACircleAtEachFinitePoint) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Chart> charts{
      {.title = "t",
       .series = {{.x = {0, 1, 2, 3}, .y = {1, nan, 3, 2}, .color = "#123456", .markers = true},
                  {.x = {0, 1, 2}, .y = {2, 2, 2}}}}};
  const std::string svg = render_svg(charts);
  const std::regex circle("<circle [^>]*fill=\"#123456\"/>");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(svg.begin(), svg.end(), circle), std::sregex_iterator()),
      3);
  size_t circles = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) {
    ++circles;
  }
  EXPECT_EQ(circles, 3u);
}

}  // namespace
}  // namespace recemb::train

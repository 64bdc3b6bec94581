#include "serve/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace recemb::serve {
namespace {

using ::testing::HasSubstr;

TEST(Metrics, RendersPrometheusText) {
  Metrics metrics;
  metrics.record_request("ctr", "lookup", 200, 0.0003);
  metrics.record_request("ctr", "lookup", 200, 0.002);
  metrics.record_request("ctr", "lookup", 400, 2.0);
  metrics.record_request("", "other", 404, 0.00005);
  metrics.add_rows("ctr", 64);
  metrics.add_rows("ctr", 3);
  metrics.set_served_version("ctr", 7, 12);
  const std::string text = metrics.render();
  EXPECT_THAT(text, HasSubstr("# TYPE recemb_serve_requests_total counter\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_requests_total{model=\"ctr\",method=\"lookup\","
                              "code=\"200\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_requests_total{model=\"ctr\",method=\"lookup\","
                              "code=\"400\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_errors_total{model=\"ctr\",method=\"lookup\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_errors_total{model=\"\",method=\"other\"} 1\n"));
  // Cumulative buckets: 0.0003 is in le=0.0005 on; 0.002 in le=0.0025 on; 2.0 only in +Inf.
  EXPECT_THAT(text, HasSubstr("recemb_serve_request_seconds_bucket{method=\"lookup\","
                              "le=\"0.00025\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_request_seconds_bucket{method=\"lookup\","
                              "le=\"0.0005\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_request_seconds_bucket{method=\"lookup\","
                              "le=\"0.0025\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_request_seconds_bucket{method=\"lookup\","
                              "le=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_request_seconds_bucket{method=\"lookup\","
                              "le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_request_seconds_count{method=\"lookup\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_request_seconds_sum{method=\"lookup\"} 2.0023\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_model_version{model=\"ctr\"} 7\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_model_delta_sequence{model=\"ctr\"} 12\n"));
  EXPECT_THAT(text, HasSubstr("recemb_serve_rows_total{model=\"ctr\"} 67\n"));
}

}  // namespace
}  // namespace recemb::serve

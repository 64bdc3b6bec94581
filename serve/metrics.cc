#include "serve/metrics.h"

#include <cstdio>

#include "support/number_text.h"

namespace recemb::serve {
namespace {

// A label value: model names are [A-Za-z0-9._-] and methods fixed words, but escape anyway.
std::string label(const std::string& value) {
  std::string escaped;
  for (char c : value) {
    if (c == '\\' || c == '"') escaped += '\\';
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped += c;
  }
  return "\"" + escaped + "\"";
}

// A bucket bound as Prometheus clients write it: "0.0005", "1".
std::string bound_text(double bound) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", bound);
  return text;
}

}  // namespace

void Metrics::record_request(const std::string& model, const std::string& method, int status,
                             double seconds) {
  const std::lock_guard lock(mutex_);
  ++requests_[{model, method, status}];
  if (status >= 400) ++errors_[{model, method}];
  Histogram& histogram = latency_[method];
  size_t bucket = 0;
  while (bucket < kLatencyBounds.size() && seconds > kLatencyBounds[bucket]) ++bucket;
  if (bucket < kLatencyBounds.size()) ++histogram.buckets[bucket];
  ++histogram.count;
  histogram.sum += seconds;
}

void Metrics::add_rows(const std::string& model, int64_t rows) {
  const std::lock_guard lock(mutex_);
  rows_[model] += rows;
}

void Metrics::set_served_version(const std::string& model, int64_t version,
                                 int64_t delta_sequence) {
  const std::lock_guard lock(mutex_);
  versions_[model] = {version, delta_sequence};
}

std::string Metrics::render() const {
  const std::lock_guard lock(mutex_);
  std::string out;
  out +=
      "# HELP recemb_serve_requests_total Requests answered, by model, method and HTTP status.\n";
  out += "# TYPE recemb_serve_requests_total counter\n";
  for (const auto& [key, count] : requests_) {
    const auto& [model, method, code] = key;
    out += "recemb_serve_requests_total{model=" + label(model) + ",method=" + label(method) +
           ",code=\"" + std::to_string(code) + "\"} " + std::to_string(count) + "\n";
  }
  out += "# HELP recemb_serve_errors_total Requests answered with a 4xx or 5xx status.\n";
  out += "# TYPE recemb_serve_errors_total counter\n";
  for (const auto& [key, count] : errors_) {
    out += "recemb_serve_errors_total{model=" + label(key.first) + ",method=" + label(key.second) +
           "} " + std::to_string(count) + "\n";
  }
  out += "# HELP recemb_serve_request_seconds Time from a request's arrival to its answer.\n";
  out += "# TYPE recemb_serve_request_seconds histogram\n";
  for (const auto& [method, histogram] : latency_) {
    int64_t cumulative = 0;
    for (size_t b = 0; b < kLatencyBounds.size(); ++b) {
      cumulative += histogram.buckets[b];
      out += "recemb_serve_request_seconds_bucket{method=" + label(method) + ",le=\"" +
             bound_text(kLatencyBounds[b]) + "\"} " + std::to_string(cumulative) + "\n";
    }
    out += "recemb_serve_request_seconds_bucket{method=" + label(method) + ",le=\"+Inf\"} " +
           std::to_string(histogram.count) + "\n";
    out += "recemb_serve_request_seconds_sum{method=" + label(method) + "} " +
           support::double_text(histogram.sum) + "\n";
    out += "recemb_serve_request_seconds_count{method=" + label(method) + "} " +
           std::to_string(histogram.count) + "\n";
  }
  out += "# HELP recemb_serve_model_version The version served of each model.\n";
  out += "# TYPE recemb_serve_model_version gauge\n";
  for (const auto& [model, served] : versions_) {
    out += "recemb_serve_model_version{model=" + label(model) + "} " +
           std::to_string(served.first) + "\n";
  }
  out += "# HELP recemb_serve_model_delta_sequence The deltas applied to the version served.\n";
  out += "# TYPE recemb_serve_model_delta_sequence gauge\n";
  for (const auto& [model, served] : versions_) {
    out += "recemb_serve_model_delta_sequence{model=" + label(model) + "} " +
           std::to_string(served.second) + "\n";
  }
  out += "# HELP recemb_serve_rows_total Examples answered (looked up or predicted), by model.\n";
  out += "# TYPE recemb_serve_rows_total counter\n";
  for (const auto& [model, rows] : rows_) {
    out += "recemb_serve_rows_total{model=" + label(model) + "} " + std::to_string(rows) + "\n";
  }
  return out;
}

}  // namespace recemb::serve

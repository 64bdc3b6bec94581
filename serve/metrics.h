// The counters `recemb serve` exports at GET /metrics, in Prometheus' text format (version 0.0.4;
// docs/serving.md, "recemb serve", lists them). Thread-safe: every method may run concurrently.
#ifndef RECEMB_SERVE_METRICS_H_
#define RECEMB_SERVE_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace recemb::serve {

class Metrics {
 public:
  // The latency histogram's bucket bounds, in seconds (and +Inf).
  static constexpr std::array<double, 12> kLatencyBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0};

  // One answered request: `model` (empty for a request naming no served model), `method`
  // ("lookup", "predict", "metadata", "healthz", "metrics", "other"), its HTTP status and how long
  // it took. A status of 400 or more also counts as an error.
  void record_request(const std::string& model, const std::string& method, int status,
                      double seconds);
  // `rows` examples answered by model `model` (looked up or predicted).
  void add_rows(const std::string& model, int64_t rows);
  // The version of `model` served and the deltas applied to it.
  void set_served_version(const std::string& model, int64_t version, int64_t delta_sequence);

  // Every metric in Prometheus' text format.
  std::string render() const;

 private:
  struct Histogram {
    std::array<int64_t, kLatencyBounds.size()> buckets = {};  // not cumulative
    int64_t count = 0;
    double sum = 0.0;
  };
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, int64_t> requests_;  // model, method, code
  std::map<std::pair<std::string, std::string>, int64_t> errors_;          // model, method
  std::map<std::string, Histogram> latency_;                               // method
  std::map<std::string, int64_t> rows_;                                    // model
  std::map<std::string, std::pair<int64_t, int64_t>> versions_;            // model: version, deltas
};

}  // namespace recemb::serve

#endif  // RECEMB_SERVE_METRICS_H_

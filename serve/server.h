// The routes of `recemb serve` (docs/serving.md, "recemb serve"): lookups and predictions of the
// served models, their descriptions, health and metrics, each answered from an HttpRequest
// without any network (HttpServer carries them).
//
//   Server server(registry, {.max_body_bytes = 64 << 20, .limits = {.max_examples = 4096}});
//   HttpResponse response = server.handle({.method = "POST", .path = "/v1/models/ctr:lookup",
//                                          .body = R"({"inputs": {"C1": [[1, 2]]}})"});
#ifndef RECEMB_SERVE_SERVER_H_
#define RECEMB_SERVE_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "serve/http_server.h"
#include "serve/json_ids.h"
#include "serve/metrics.h"
#include "serve/model_registry.h"

namespace recemb::serve {

struct ServerOptions {
  int64_t max_body_bytes = 64 << 20;  // a longer body is refused (413)
  // Examples per request (more are refused: 400) and the memory one request may take (more is
  // refused: 413).
  RequestLimits limits = {};
};

class Server {
 public:
  Server(std::shared_ptr<const ModelRegistry> registry, const ServerOptions& options);

  // The answer to `request`, counted in the metrics. Never throws: a bad request gets a 4xx, a
  // failure to allocate memory a 503, any other internal failure a 500, each with {"error":
  // {"code": ..., "message": ...}} (docs/serving.md, "Errors").
  HttpResponse handle(const HttpRequest& request);
  // The answer to a request the HTTP layer refused (HttpServer's refusal), counted in the metrics.
  HttpResponse refusal(const HttpRefusal& refusal);

  const Metrics& metrics() const { return metrics_; }

 private:
  struct Route;
  HttpResponse route(const HttpRequest& request, Route& route);
  HttpResponse lookup(const HttpRequest& request, const ServedModel& model);
  HttpResponse predict(const HttpRequest& request, const ServedModel& model);
  HttpResponse describe_model(const ServedModel& model) const;
  HttpResponse list_models() const;

  std::shared_ptr<const ModelRegistry> registry_;
  ServerOptions options_;
  Metrics metrics_;
};

}  // namespace recemb::serve

#endif  // RECEMB_SERVE_SERVER_H_

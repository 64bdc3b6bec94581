// `recemb serve MODEL_DIR [--listen 127.0.0.1:8500] [--threads N] [--max-body-bytes B]
// [--max-examples E] [--max-request-memory M] [--max-buffered-bytes T] [--poll-seconds S]`: the
// models of MODEL_DIR (MODEL_DIR/NAME/VERSION/model.recemb) over HTTP/1.1 (docs/serving.md, "recemb
// serve", specifies the endpoints and bodies), until SIGINT or SIGTERM.
#ifndef RECEMB_TOOLS_RECEMB_SERVE_COMMAND_H_
#define RECEMB_TOOLS_RECEMB_SERVE_COMMAND_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace recemb::tools {

// The bounds of ServeArguments (docs/serving.md, "recemb serve").
inline constexpr int64_t kMaxExamplesLimit = 1'000'000;
inline constexpr double kMinPollSeconds = 0.01;
inline constexpr double kMaxPollSeconds = 86400;  // a day

struct ServeArguments {
  std::string model_dir = {};
  std::string listen = "127.0.0.1:8500";  // HOST:PORT; port 0: any free port (logged)
  int threads = 0;  // threads running the event loop; 0 (or more than the cores): one per core
  int64_t max_body_bytes = 64 << 20;
  int64_t max_examples = 4096;  // per request, 1 to kMaxExamplesLimit
  // Bytes one request's decoded ids and its answer may take (serve::RequestLimits).
  int64_t max_request_memory = int64_t{256} << 20;
  // Bytes of request bodies held at once over all connections (serve::HttpServerOptions).
  int64_t max_buffered_bytes = int64_t{1} << 30;
  // MODEL_DIR is scanned for new versions this often: kMinPollSeconds to kMaxPollSeconds, or 0:
  // never.
  double poll_seconds = 1.0;
};

struct ListenAddress {
  std::string host = {};
  int port = 0;
};

// "HOST:PORT" ("[::1]:8500" for an IPv6 host), PORT 0 to 65535. InvalidArgument naming --listen
// otherwise.
ListenAddress parse_listen_address(std::string_view listen);

// Loads the models (ModelRegistry: each model served and each version refused is logged on
// `err`), listens (logging "recemb serve: listening on HOST:PORT") and answers requests until the
// process receives SIGINT or SIGTERM, meanwhile swapping in new versions every poll_seconds
// (ModelRegistry::refresh); then stops accepting, answers the requests in flight and
// returns 0. SIGINT and SIGTERM are blocked in the calling thread (and the threads it starts)
// while it runs. Throws InvalidArgument, before listening, for bad arguments, a MODEL_DIR with no
// model to serve when poll_seconds is 0 (with polling it serves none until one appears), or an
// address it cannot listen on.
int run_serve_command(const ServeArguments& args, std::ostream& err);

}  // namespace recemb::tools

#endif  // RECEMB_TOOLS_RECEMB_SERVE_COMMAND_H_

#include "tools/recemb/serve_command.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <sstream>
#include <string>
#include <thread>

#include "recemb/error.h"

#include "serve/http_server.h"
#include "serve/model_registry.h"
#include "serve/server.h"

namespace recemb::tools {
namespace {

// Blocks SIGINT and SIGTERM in the calling thread (and so in the threads it starts) for its
// lifetime, so that only sigwait receives them.
class BlockedSignals {
 public:
  BlockedSignals() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, &previous_);
  }
  ~BlockedSignals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;

  const sigset_t& signals() const { return signals_; }

 private:
  sigset_t signals_;
  sigset_t previous_;
};

}  // namespace

ListenAddress parse_listen_address(std::string_view listen) {
  const auto bad = [listen](const std::string& why) {
    return InvalidArgument("--listen '" + std::string(listen) + "': " + why +
                           " (expected HOST:PORT, e.g. 127.0.0.1:8500)");
  };
  const size_t colon = listen.rfind(':');
  if (colon == std::string_view::npos) throw bad("no port");
  std::string_view host = listen.substr(0, colon);
  const std::string_view port_text = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) throw bad("no host");
  int port = -1;
  const auto [end, error] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || error != std::errc() || end != port_text.data() + port_text.size() ||
      port < 0 || port > 65535) {
    throw bad("the port must be an integer from 0 to 65535");
  }
  return {.host = std::string(host), .port = port};
}

int run_serve_command(const ServeArguments& args, std::ostream& err) {
  const ListenAddress address = parse_listen_address(args.listen);
  if (args.threads < 0) throw InvalidArgument("--threads must be >= 0 (0: one per core)");
  if (args.max_body_bytes < 1) throw InvalidArgument("--max-body-bytes must be >= 1");
  if (args.max_examples < 1 || args.max_examples > kMaxExamplesLimit) {
    throw InvalidArgument("--max-examples " + std::to_string(args.max_examples) +
                          ": must be from 1 to " + std::to_string(kMaxExamplesLimit));
  }
  if (!(args.poll_seconds == 0 ||
        (args.poll_seconds >= kMinPollSeconds && args.poll_seconds <= kMaxPollSeconds))) {
    std::ostringstream message;
    message << "--poll-seconds " << args.poll_seconds << ": must be 0 (never scan again) or from "
            << kMinPollSeconds << " to " << kMaxPollSeconds << " (a day)";
    throw InvalidArgument(message.str());
  }
  if (args.max_request_memory < 1) throw InvalidArgument("--max-request-memory must be >= 1");
  if (args.max_buffered_bytes < args.max_body_bytes) {
    throw InvalidArgument(
        "--max-buffered-bytes must be at least --max-body-bytes (a body of "
        "that size must fit)");
  }

  const BlockedSignals blocked;  // before any thread starts
  // With polling on, a directory with no model yet is served (a trainer publishes into it later).
  auto registry =
      std::make_shared<serve::ModelRegistry>(args.model_dir, err, args.poll_seconds > 0);
  serve::Server server(registry, {.max_body_bytes = args.max_body_bytes,
                                  .limits = {.max_examples = args.max_examples,
                                             .max_request_memory = args.max_request_memory}});
  serve::HttpServer http(
      {.host = address.host,
       .port = address.port,
       .threads = args.threads,
       .max_body_bytes = args.max_body_bytes,
       .max_buffered_bytes = args.max_buffered_bytes,
       .log = &err},
      [&server](const serve::HttpRequest& request) { return server.handle(request); },
      [&server](const serve::HttpRefusal& refusal) { return server.refusal(refusal); });
  // An IPv6 host in brackets, as --listen takes it.
  const bool ipv6 = address.host.find(':') != std::string::npos;
  err << "recemb serve: listening on " << (ipv6 ? "[" + address.host + "]" : address.host) << ":"
      << http.port() << " (" << http.threads() << " threads)\n"
      << std::flush;

  // Hot swap: the registry rescans MODEL_DIR every poll_seconds until the server stops (the
  // jthread is asked to stop and joined when this function returns or throws).
  std::mutex poll_mutex;
  std::condition_variable_any poll_wakeup;
  const std::jthread poller([&](const std::stop_token& stop) {
    if (args.poll_seconds == 0) return;
    const auto period = std::chrono::duration<double>(args.poll_seconds);
    std::unique_lock lock(poll_mutex);
    for (;;) {
      poll_wakeup.wait_for(lock, stop, period, [] { return false; });
      if (stop.stop_requested()) return;
      try {
        registry->refresh(stop);               // a file being read stops within a chunk
      } catch (const std::exception& error) {  // e.g. MODEL_DIR unreadable: keep serving
        err << "recemb serve: scanning " << args.model_dir << ": " << error.what() << "\n";
      }
    }
  });

  std::atomic<bool> finished{false};
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&blocked.signals(), &signal);
    if (!finished) {
      err << "recemb serve: " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
          << ": stopping (answering the requests in flight)\n"
          << std::flush;
    }
    http.stop();
  });
  http.run();
  finished = true;
  pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter if no signal came
  waiter.join();
  err << "recemb serve: stopped\n" << std::flush;
  return 0;
}

}  // namespace recemb::tools

#include "serve/http_server.h"

#include <atomic>
#include <httplib.h>
#include <malloc.h>
#include <sys/socket.h>
#include <thread>

#include "recemb/error.h"

namespace recemb::serve {

struct HttpServer::Impl {
  httplib::Server server;
  int port = 0;
  int listening_socket = -1;
  // stop() and run() may race: either run() sees `stopped`, or stop() sees `started` and waits
  // until the library's loop runs (or has ended) to stop it.
  std::atomic<bool> stopped{false};
  std::atomic<bool> started{false};
  std::atomic<bool> finished{false};
};

namespace {

constexpr size_t kKeepAliveRequests = 1000;

void answer(HttpResponse&& response, httplib::Response& out) {
  out.status = response.status;
  out.body = std::move(response.body);  // not copied: answers are up to megabytes
  out.set_header("Content-Type", response.content_type);
}

}  // namespace

HttpServer::HttpServer(const HttpServerOptions& options,
                       std::function<HttpResponse(const HttpRequest&)> handler,
                       std::function<HttpResponse(int status)> refusal)
    : impl_(std::make_unique<Impl>()) {
  // Each request allocates and frees buffers of its answer's size (a binary answer of 64 examples
  // x 26 features of dim 16: 106 KB) on its thread. glibc would give the freed memory back to the
  // system at once (madvise, brk) and fault it in again for the next request, each time flushing
  // the TLBs of every core: keep up to 64 MiB freed instead. Process-wide; a server process
  // allocates for its requests.
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  mallopt(M_MMAP_THRESHOLD, 16 << 20);
  httplib::Server& server = impl_->server;
  const auto threads = static_cast<size_t>(std::max(options.threads, 1));
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // SO_REUSEADDR only (a restart may bind while old connections linger), not httplib's default
  // SO_REUSEPORT, with which a second server on the same port would share its connections.
  server.set_socket_options([impl = impl_.get()](socket_t socket) {
    const int on = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    impl->listening_socket = socket;
  });
  // Answers leave at once (no Nagle delay between the headers and the body), and a client keeps
  // its connection for kKeepAliveRequests requests (httplib's default, 5, made clients reconnect
  // all the time); then it is closed ("Connection: close"), so that connections waiting for a
  // thread get their turn.
  server.set_tcp_nodelay(true);
  server.set_keep_alive_max_count(kKeepAliveRequests);
  server.set_read_timeout(options.read_timeout_seconds);
  server.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
  const httplib::Server::Handler route = [handler](const httplib::Request& request,
                                                   httplib::Response& response) {
    // The body is moved, not copied: httplib hands the request over as const, but it is the
    // library's own local of this request, which it does not read again (no logger is set).
    answer(handler({.method = request.method,
                    .path = request.path,
                    .content_type = request.get_header_value("Content-Type"),
                    .body = std::move(const_cast<httplib::Request&>(request).body)}),
           response);
  };
  // Every path of every method goes to `handler` (".*" matches the whole path).
  server.Get(".*", route).Post(".*", route).Put(".*", route).Patch(".*", route);
  server.Delete(".*", route).Options(".*", route);
  // Statuses the library set itself (no handler ran: the body is still empty).
  server.set_error_handler([refusal](const httplib::Request&, httplib::Response& response) {
    if (response.body.empty()) answer(refusal(response.status), response);
  });
  const std::string address = options.host + ":" + std::to_string(options.port);
  if (options.port == 0) {
    impl_->port = server.bind_to_any_port(options.host);
  } else if (server.bind_to_port(options.host, options.port)) {
    impl_->port = options.port;
  }
  if (impl_->port <= 0) {
    throw InvalidArgument("cannot listen on " + address +
                          " (is the port in use, or the host not an address of this machine?)");
  }
  // httplib listens with a backlog of 5: clients connecting at once beyond that would wait for
  // their SYN's retransmission (1 s). Listening again only raises the backlog.
  listen(impl_->listening_socket, SOMAXCONN);
}

HttpServer::~HttpServer() = default;

int HttpServer::port() const { return impl_->port; }

void HttpServer::run() {
  impl_->started = true;
  if (!impl_->stopped) impl_->server.listen_after_bind();
  impl_->finished = true;
}

void HttpServer::stop() {
  impl_->stopped = true;
  if (!impl_->started) return;
  while (!impl_->server.is_running() && !impl_->finished) std::this_thread::yield();
  impl_->server.stop();
}

}  // namespace recemb::serve

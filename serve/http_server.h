// An HTTP/1.1 server on Boost.Beast and Boost.Asio (http_server.cc is the only file of recemb that
// includes them): an event loop, run by a few threads, answering every request with one handler,
// over keep-alive connections (TCP_NODELAY).
//
//   HttpServer server({.host = "127.0.0.1", .port = 0, .threads = 4, .max_body_bytes = 1 << 20},
//                     handler);
//   server.port();   // the port bound (port 0: one the system chose)
//   server.run();    // until server.stop(), from another thread or a signal handler's thread
#ifndef RECEMB_SERVE_HTTP_SERVER_H_
#define RECEMB_SERVE_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>

namespace recemb::serve {

struct HttpRequest {
  std::string method = {};        // "GET", "POST", ...
  std::string path = {};          // without the query
  std::string content_type = {};  // the Content-Type header, "" when absent
  std::string body = {};
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body = {};
};

// A request the HTTP layer refuses itself, with its status and a message that names the limit or
// the rule it broke (and the `recemb serve` flag that sets a limit).
struct HttpRefusal {
  int status = 400;
  std::string message = {};
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (HttpServer::port says which)
  // Threads running the event loop, which serves every open connection (none waits for another to
  // close) and runs the handler: 0, or more than the machine's cores, means as many as the cores
  // (more would only take turns on them).
  int threads = 0;
  int64_t max_body_bytes = 0;  // larger bodies are refused with 413 before they are read
  // The bytes of request bodies held at once, over all connections (--max-buffered-bytes): a
  // body is counted from its headers (its Content-Length; a chunked body chunk by chunk) until
  // the handler has answered it, and one that would go beyond is refused with 503 before it is
  // read.
  int64_t max_buffered_bytes = int64_t{1} << 30;
  // A request (headers and body) not received within this many seconds of the previous answer (or
  // of the connection) is refused with 408; a connection idle that long is closed, and so is one
  // whose client does not take its answer that long.
  int read_timeout_seconds = 5;
  // Where the server logs what it cannot do: accepting connections while the process is out of
  // file descriptors (EMFILE, ENFILE) or memory, which it then retries after 50 ms, doubling up
  // to 1 s (logged once per episode, and when it accepts again).
  std::ostream* log = &std::cerr;
};

// The longest header section (request line and header fields) a request may have: longer ones are
// refused with 431, or 414 when the request line alone is longer.
inline constexpr size_t kMaxHeaderBytes = 8 << 10;

class HttpServer {
 public:
  // Answers every request (any method and path) with `handler`, which should not throw (one that
  // does has its connection closed) and runs on a thread of the event loop (keep it short: a
  // lookup takes tens of µs). Requests the HTTP layer refuses itself are answered by `refusal`,
  // given the status and a message: a malformed request (400), one not received within
  // read_timeout_seconds (408), a body over max_body_bytes (413), a request line over
  // kMaxHeaderBytes (414), a header section over it (431), a transfer coding other than chunked
  // (501), a body that would take the bodies held beyond max_buffered_bytes (503). Binds the
  // address before returning: throws InvalidArgument naming the address when it cannot (in use,
  // not an address of this machine).
  HttpServer(const HttpServerOptions& options,
             std::function<HttpResponse(const HttpRequest&)> handler,
             std::function<HttpResponse(const HttpRefusal&)> refusal);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // The threads running the event loop (HttpServerOptions::threads, resolved).
  int threads() const;
  // Accepts and answers requests until stop(). Returns once the requests in flight are answered.
  void run();
  // Stops accepting and closes the idle connections; run() then returns when the requests in
  // flight are answered (their connections closed after the answer). Thread-safe; before run() it
  // makes run() return at once.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace recemb::serve

#endif  // RECEMB_SERVE_HTTP_SERVER_H_

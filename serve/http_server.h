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

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (HttpServer::port says which)
  // Threads running the event loop, which serves every open connection (none waits for another to
  // close) and runs the handler: 0, or more than the machine's cores, means as many as the cores
  // (more would only take turns on them).
  int threads = 0;
  int64_t max_body_bytes = 0;  // larger bodies are refused with 413 before they are read
  // A request (headers and body) not received within this many seconds of the previous answer (or
  // of the connection) is refused with 400; a connection idle that long is closed, and so is one
  // whose client does not take its answer that long.
  int read_timeout_seconds = 5;
  // Where the server logs what it cannot do: accepting connections while the process is out of
  // file descriptors (EMFILE, ENFILE) or memory, which it then retries after 50 ms, doubling up
  // to 1 s (logged once per episode, and when it accepts again).
  std::ostream* log = &std::cerr;
};

class HttpServer {
 public:
  // Answers every request (any method and path) with `handler`, which must not throw and runs on a
  // thread of the event loop (keep it short: a lookup takes tens of µs). Requests the
  // HTTP layer refuses itself (a body over max_body_bytes: 413; a malformed request: 400) are
  // answered by `refusal`, given the status; so is one that does not arrive within
  // read_timeout_seconds (400). Binds the address before returning: throws
  // InvalidArgument naming the address when it cannot (in use, not an address of this machine).
  HttpServer(const HttpServerOptions& options,
             std::function<HttpResponse(const HttpRequest&)> handler,
             std::function<HttpResponse(int status)> refusal);
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

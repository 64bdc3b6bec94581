// An HTTP/1.1 server on cpp-httplib (the only file of recemb that includes httplib.h): a pool of
// threads answering every request with one handler, over keep-alive connections (TCP_NODELAY).
//
//   HttpServer server({.host = "127.0.0.1", .port = 0, .threads = 4, .max_body_bytes = 1 << 20},
//                     handler);
//   server.port();   // the port bound (port 0: one the system chose)
//   server.run();    // until server.stop(), from another thread or a signal handler's thread
#ifndef RECEMB_SERVE_HTTP_SERVER_H_
#define RECEMB_SERVE_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
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
  // Connections served at once: each open connection has a thread of its own (httplib) until it
  // closes (after 1000 requests, or idle for 5 s); a connection beyond waits.
  int threads = 1;
  int64_t max_body_bytes = 0;  // larger bodies are refused with 413 before they are read
  // A request (headers and body) not received within this many seconds is refused with 400.
  int read_timeout_seconds = 5;
};

class HttpServer {
 public:
  // Answers every request (any method and path) with `handler`, which must not throw. Requests the
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
  // Accepts and answers requests until stop(). Returns once the requests in flight are answered.
  void run();
  // Stops accepting; run() then returns when the requests in flight are answered. Thread-safe;
  // before run() it makes run() return at once.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace recemb::serve

#endif  // RECEMB_SERVE_HTTP_SERVER_H_

#include "serve/http_server.h"

#include <arpa/inet.h>
#include <atomic>
#include <fcntl.h>
#include <future>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "recemb/error.h"

#include "support/json.h"
#include "testing/error_of.h"
#include "testing/http_client.h"

namespace recemb::serve {
namespace {

using ::testing::HasSubstr;

using recemb::test::HttpClient;

// A client of the server on `port`, every wait bounded (20 s).
HttpClient client_of(int port) { return HttpClient("127.0.0.1", port, 20); }

// {"refused": STATUS, "message": MESSAGE}
HttpResponse refuse(const HttpRefusal& refusal) {
  return {.status = refusal.status,
          .body = "{\"refused\": " + std::to_string(refusal.status) +
                  ", \"message\": " + support::json_string(refusal.message) + "}"};
}

TEST(HttpServer, EveryRequestReachesTheHandler) {
  HttpServer server(
      {.port = 0, .threads = 2, .max_body_bytes = 100},
      [](const HttpRequest& request) {
        return HttpResponse{.status = request.method == "GET" ? 200 : 201,
                            .content_type = "text/plain",
                            .body = request.method + " " + request.path + " " +
                                    request.content_type + " " + request.body};
      },
      refuse);
  ASSERT_GT(server.port(), 0);
  std::thread runner([&] { server.run(); });
  HttpClient client = client_of(server.port());
  auto got = client.get("/a/b:c?x=1");
  ASSERT_TRUE(got) << client.error();
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->body, "GET /a/b:c  ");
  EXPECT_EQ(got->header("Content-Type"), "text/plain");
  got = client.post("/v1/models/m:lookup", "hello", "application/octet-stream");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 201);
  EXPECT_EQ(got->body, "POST /v1/models/m:lookup application/octet-stream hello");
  got = client.request("DELETE", "/x", "", "");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->body, "DELETE /x  ");
  // A body over max_body_bytes is refused before the handler, by `refusal`.
  got = client.post("/big", std::string(101, 'x'), "application/json");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 413);
  EXPECT_EQ(got->body,
            "{\"refused\": 413, \"message\": \"the body is longer than --max-body-bytes 100\"}");
  server.stop();
  runner.join();
}

// A body far over the limit is refused with 413 before it is read, and the client, still sending
// it, gets the answer (the server reads and drops the rest instead of resetting the connection).
TEST(HttpServer, ALargeRefusedBodyGetsItsAnswer) {
  HttpServer server(
      {.port = 0, .threads = 2, .max_body_bytes = 100},
      [](const HttpRequest& request) { return HttpResponse{.body = request.path}; }, refuse);
  std::thread runner([&] { server.run(); });
  HttpClient client = client_of(server.port());
  for (int i = 0; i < 3; ++i) {
    const auto got = client.post("/big", std::string(size_t{16} << 20, 'x'), "application/json");
    ASSERT_TRUE(got) << client.error();
    EXPECT_EQ(got->status, 413);
    EXPECT_THAT(got->body, HasSubstr("{\"refused\": 413, "));
  }
  const auto got = client.get("/small");  // and the server keeps serving
  ASSERT_TRUE(got) << client.error();
  EXPECT_EQ(got->body, "/small");
  server.stop();
  runner.join();
}

// A socket connected to 127.0.0.1:`port` (blocking, receives bounded by 20 s), or -1.
int connect_to(int port) {
  const int socket = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const timeval timeout{.tv_sec = 20, .tv_usec = 0};  // bounds the test, never reached
  setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (connect(socket, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    close(socket);
    return -1;
  }
  return socket;
}

// One answer read from `socket`: its status line and headers (lower case) and its body of
// Content-Length bytes; "" when the connection closes first.
std::string read_answer(int socket, std::string& body) {
  std::string header;
  char c = 0;
  while (!header.ends_with("\r\n\r\n")) {
    if (recv(socket, &c, 1, 0) != 1) return "";
    header += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  const size_t length = header.find("content-length: ");
  if (length == std::string::npos) return "";
  body.resize(std::stoul(header.substr(length + 16)));
  size_t got = 0;
  while (got < body.size()) {
    const ssize_t n = recv(socket, body.data() + got, body.size() - got, 0);
    if (n <= 0) return "";
    got += static_cast<size_t>(n);
  }
  return header;
}

// One exchange with the server on `port` over a new connection: sends `request` whole, then
// returns what comes back until a JSON body has ended ('}'), the connection closes or 20 s pass.
std::string exchange(int port, const std::string& request) {
  const int socket = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const timeval timeout{.tv_sec = 20, .tv_usec = 0};  // bounds the test, never reached
  setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string answer;
  if (connect(socket, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 &&
      send(socket, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    // Until the JSON body has come (headers and body may come in separate reads).
    char buffer[4096];
    while (answer.empty() || answer.back() != '}') {
      const ssize_t got = recv(socket, buffer, sizeof buffer, 0);
      if (got <= 0) break;
      answer.append(buffer, static_cast<size_t>(got));
    }
  }
  close(socket);
  return answer;
}

// Requests the HTTP layer refuses get the status of what they broke and a message naming the
// limit or the rule: a malformed one (400), a header section or request line over 8 KiB (431,
// 414), a transfer coding it does not read (501), and one not received in full within the read
// timeout (408: what was missing). No hang; the stalled ones wait out the timeout (1 s) at once.
TEST(HttpServer, RefusedRequestsAreAnsweredNamingTheLimit) {
  HttpServer server(
      {.port = 0, .threads = 2, .max_body_bytes = 100, .read_timeout_seconds = 1},
      [](const HttpRequest& request) { return HttpResponse{.body = "{" + request.body + "}"}; },
      refuse);
  std::thread runner([&] { server.run(); });
  std::string many_fields;
  for (int i = 0; i < 10000; ++i) many_fields += "X-" + std::to_string(i) + ": v\r\n";
  const std::string post = "POST /x HTTP/1.1\r\nHost: h\r\n";
  struct Case {
    std::string request;
    std::string status;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"NONSENSE\r\n\r\n", "400", "a malformed HTTP request ("},
      {"GET /x HTTP/1.1\r\nHost: h\r\nX-Big: " + std::string(100000, 'a') + "\r\n\r\n", "431",
       "the request's header section is longer than 8192 bytes (its limit): send fewer or "
       "shorter header fields"},
      {"GET /x HTTP/1.1\r\nHost: h\r\n" + many_fields + "\r\n", "431",
       "header section is longer than 8192 bytes"},
      {"GET /" + std::string(100000, 'u') + " HTTP/1.1\r\nHost: h\r\n\r\n", "414",
       "the request line (method, URL and version) is longer than 8192 bytes"},
      {post + "Transfer-Encoding: gzip, chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n", "501",
       "Transfer-Encoding 'gzip': this server reads bodies as they are sent or chunked"},
      {post + "Transfer-Encoding: GZIP\r\nContent-Length: 4\r\n\r\nabcd", "501",
       "Transfer-Encoding 'GZIP'"},
      {post + "Transfer-Encoding: Chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n", "200", "{abcd}"},
      {post + "Content-Length: 50\r\n\r\n{\"in", "408",
       "the request was not received in full within the read timeout of 1 s (from the connection "
       "or the previous answer): its body ended at 4 bytes of Content-Length 50"},
      {post + "Transfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n", "408",
       "its chunked body did not end (no last, empty chunk) after 4 bytes"},
      {post + "Content-Length: 5", "408", "its header section did not end (no empty line)"},
  };
  std::vector<std::future<std::string>> answers;
  for (const Case& c : cases) {
    answers.push_back(std::async(std::launch::async,
                                 [&server, &c] { return exchange(server.port(), c.request); }));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string answer = answers[i].get();
    EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 " + cases[i].status)) << i;
    EXPECT_THAT(answer, HasSubstr(cases[i].message)) << i;
  }
  server.stop();
  runner.join();
}

// The bytes of bodies held at once are bounded over all connections: a body that would go beyond
// is refused with 503 before it is read, while the server answers the others; once the bodies
// held are answered, it is taken again.
TEST(HttpServer, BodiesHeldAtOnceAreBounded) {
  HttpServer server(
      {.port = 0, .threads = 2, .max_body_bytes = 1000, .max_buffered_bytes = 1500},
      [](const HttpRequest& request) {
        return HttpResponse{.body = std::to_string(request.body.size())};
      },
      refuse);
  std::thread runner([&] { server.run(); });
  // A request of 1000 bytes, begun: its headers have been read (the server said to go on).
  const int first = connect_to(server.port());
  ASSERT_GE(first, 0);
  const std::string headers =
      "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n";
  ASSERT_EQ(send(first, headers.data(), headers.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(headers.size()));
  std::string go_ahead(25, '\0');
  ASSERT_EQ(recv(first, go_ahead.data(), go_ahead.size(), MSG_WAITALL), 25);
  EXPECT_EQ(go_ahead, "HTTP/1.1 100 Continue\r\n\r\n");

  HttpClient client = client_of(server.port());
  auto got = client.post("/b", std::string(600, 'x'), "application/octet-stream");
  ASSERT_TRUE(got) << client.error();
  EXPECT_EQ(got->status, 503);
  EXPECT_THAT(got->body, HasSubstr("the request bodies held at once would take more than "
                                   "--max-buffered-bytes 1500 bytes"));
  // Chunked: counted chunk by chunk.
  const std::string chunked =
      exchange(server.port(),
               "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n190\r\n" +
                   std::string(400, 'y') + "\r\n190\r\n" + std::string(400, 'y') + "\r\n0\r\n\r\n");
  EXPECT_THAT(chunked, ::testing::StartsWith("HTTP/1.1 503"));
  got = client.post("/d", std::string(500, 'x'), "application/octet-stream");  // fits: 1500
  ASSERT_TRUE(got) << client.error();
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->body, "500");

  // The first body completes and is answered; its bytes are free again.
  const std::string body(1000, 'z');
  ASSERT_EQ(send(first, body.data(), body.size(), MSG_NOSIGNAL), 1000);
  std::string answer_body;
  EXPECT_THAT(read_answer(first, answer_body), ::testing::StartsWith("http/1.1 200"));
  EXPECT_EQ(answer_body, "1000");
  close(first);
  got = client.post("/e", std::string(1000, 'x'), "application/octet-stream");
  ASSERT_TRUE(got) << client.error();
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->body, "1000");
  server.stop();
  runner.join();
}

// A handler that throws (it could not even build an answer: out of memory) has its connection
// closed; the server goes on serving, and stops at once when asked.
TEST(HttpServer, AHandlerThatThrowsEndsItsConnectionOnly) {
  HttpServer server(
      {.port = 0, .threads = 1, .max_body_bytes = 100},
      [](const HttpRequest& request) {
        if (request.path == "/throw") throw std::bad_alloc();
        return HttpResponse{.body = request.path};
      },
      refuse);
  auto running = std::async(std::launch::async, [&] { server.run(); });
  EXPECT_EQ(exchange(server.port(), "GET /throw HTTP/1.1\r\nHost: h\r\n\r\n"), "");
  HttpClient client = client_of(server.port());
  const auto got = client.get("/ok");
  ASSERT_TRUE(got) << client.error();
  EXPECT_EQ(got->body, "/ok");
  server.stop();
  EXPECT_EQ(running.wait_for(std::chrono::seconds(20)), std::future_status::ready);
}

// stop() lets the request in flight finish, and run() then returns.
TEST(HttpServer, StopAnswersTheRequestsInFlight) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  HttpServer server(
      {.port = 0, .threads = 2, .max_body_bytes = 100},
      [&](const HttpRequest&) {
        entered.set_value();
        released.wait();
        return HttpResponse{.body = "done"};
      },
      refuse);
  std::thread runner([&] { server.run(); });
  auto answer = std::async(std::launch::async, [&] {
    HttpClient client = client_of(server.port());
    const std::optional<recemb::test::HttpAnswer> got = client.get("/slow");
    return got ? got->body : "failed: " + client.error();
  });
  ASSERT_EQ(entered.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
  std::thread stopper([&] { server.stop(); });
  release.set_value();
  EXPECT_EQ(answer.get(), "done");
  stopper.join();
  runner.join();
  // No longer listening.
  HttpClient client("127.0.0.1", server.port(), 2);
  EXPECT_FALSE(client.get("/healthz"));
}

// A client may send many requests on one connection, none closing it.
TEST(HttpServer, OneConnectionServesManyRequests) {
  HttpServer server(
      {.port = 0, .threads = 2, .max_body_bytes = 100},
      [](const HttpRequest& request) { return HttpResponse{.body = request.body}; }, refuse);
  std::thread runner([&] { server.run(); });
  const int socket = connect_to(server.port());
  ASSERT_GE(socket, 0);
  for (int i = 0; i < 50; ++i) {
    const std::string body = "request " + std::to_string(i);
    const std::string request =
        "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    ASSERT_EQ(send(socket, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    std::string answer_body;
    const std::string header = read_answer(socket, answer_body);
    ASSERT_THAT(header, ::testing::StartsWith("http/1.1 200")) << "request " << i;
    EXPECT_EQ(header.find("connection: close"), std::string::npos) << "request " << i;
    EXPECT_EQ(answer_body, body);
  }
  close(socket);
  server.stop();
  runner.join();
}

// Many clients connecting at once are queued by the system until the server accepts them (the
// listen backlog): none waits for its connection request to be sent again.
TEST(HttpServer, ClientsConnectingAtOnceAreQueued) {
  HttpServer server(
      {.port = 0, .threads = 1, .max_body_bytes = 10},
      [](const HttpRequest&) { return HttpResponse{}; }, refuse);
  // Not running: nothing accepts, so every connection waits in the backlog.
  constexpr int kClients = 64;
  std::vector<pollfd> sockets;
  for (int i = 0; i < kClients; ++i) {
    const int socket = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server.port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connect(socket, reinterpret_cast<const sockaddr*>(&address), sizeof address);
    sockets.push_back({.fd = socket, .events = POLLOUT, .revents = 0});
  }
  // Connected: writable without an error. A connection request dropped by a full backlog is sent
  // again after 1 s, then 3 s, ...: never accepted here, it stays in progress.
  int connected = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (connected < kClients && std::chrono::steady_clock::now() < deadline) {
    if (poll(sockets.data(), sockets.size(), 100) <= 0) continue;
    for (pollfd& socket : sockets) {
      if ((socket.revents & POLLOUT) == 0) continue;
      int error = 0;
      socklen_t size = sizeof error;
      getsockopt(socket.fd, SOL_SOCKET, SO_ERROR, &error, &size);
      EXPECT_EQ(error, 0);
      ++connected;
      socket.events = 0;  // counted
    }
  }
  for (const pollfd& socket : sockets) close(socket.fd);
  EXPECT_EQ(connected, kClients);
}

// stop() closes the idle keep-alive connections at once: run() returns without waiting for their
// read timeout (10 minutes here; the test waits 20 s at most).
TEST(HttpServer, StopClosesIdleConnections) {
  HttpServer server(
      {.port = 0, .threads = 2, .max_body_bytes = 10, .read_timeout_seconds = 600},
      [](const HttpRequest& request) { return HttpResponse{.body = request.path}; }, refuse);
  auto running = std::async(std::launch::async, [&] { server.run(); });
  std::vector<int> sockets;
  for (int i = 0; i < 4; ++i) {
    sockets.push_back(connect_to(server.port()));
    ASSERT_GE(sockets.back(), 0);
    const std::string request = "GET /idle HTTP/1.1\r\nHost: h\r\n\r\n";
    ASSERT_EQ(send(sockets.back(), request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    std::string body;
    EXPECT_THAT(read_answer(sockets.back(), body), ::testing::StartsWith("http/1.1 200"));
    EXPECT_EQ(body, "/idle");
  }
  server.stop();
  EXPECT_EQ(running.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  for (const int socket : sockets) {
    char byte = 0;
    EXPECT_EQ(recv(socket, &byte, 1, 0), 0);  // closed by the server
    close(socket);
  }
}

// Out of file descriptors (EMFILE), accepting a connection fails: the server tries again after
// 50 ms, doubling up to 1 s, instead of at once (a busy loop), logs it once, and serves the
// waiting client once a descriptor is free again.
TEST(HttpServer, AcceptingWithoutFileDescriptorsBacksOffAndLogs) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizers' runtime checks memory through a pipe (UBSan's vptr check, their reports):
  // without a free file descriptor it takes valid objects for invalid ones.
  GTEST_SKIP() << "the sanitizers' runtime needs file descriptors this test takes away";
#endif
  std::ostringstream log;  // read once the server has stopped
  HttpServer server(
      {.port = 0, .threads = 1, .max_body_bytes = 10, .log = &log},
      [](const HttpRequest& request) { return HttpResponse{.body = request.path}; }, refuse);
  auto running = std::async(std::launch::async, [&] { server.run(); });
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  const int lowest_free = dup(0);
  close(lowest_free);
  // Room for the client's socket, none for the server's end of it.
  const rlimit exhausted{.rlim_cur = static_cast<rlim_t>(lowest_free + 1),
                         .rlim_max = limit.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &exhausted), 0);
  const int socket = connect_to(server.port());
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  getrusage(RUSAGE_SELF, &after);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  const auto seconds = [](const timeval& time) {
    return static_cast<double>(time.tv_sec) + static_cast<double>(time.tv_usec) * 1e-6;
  };
  const double cpu = seconds(after.ru_utime) + seconds(after.ru_stime) - seconds(before.ru_utime) -
                     seconds(before.ru_stime);
  EXPECT_LT(cpu, 0.1) << "CPU seconds spent in 0.5 s without file descriptors";
  ASSERT_GE(socket, 0);
  const std::string request = "GET /after HTTP/1.1\r\nHost: h\r\n\r\n";
  ASSERT_EQ(send(socket, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string body;
  EXPECT_THAT(read_answer(socket, body), ::testing::StartsWith("http/1.1 200"));
  EXPECT_EQ(body, "/after");
  close(socket);
  server.stop();
  ASSERT_EQ(running.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  const std::string text = log.str();
  EXPECT_EQ(text.find("cannot accept connections (Too many open files)"),
            text.rfind("cannot accept connections"))
      << text;
  EXPECT_THAT(text, HasSubstr("cannot accept connections (Too many open files)"));
  EXPECT_THAT(text, HasSubstr("accepting connections again"));
}

// An IPv6 host (the loopback address ::1) is listened on and served.
TEST(HttpServer, ServesAnIpv6Host) {
  HttpServer server(
      {.host = "::1", .port = 0, .threads = 1, .max_body_bytes = 10},
      [](const HttpRequest& request) { return HttpResponse{.body = request.path}; }, refuse);
  std::thread runner([&] { server.run(); });
  HttpClient client("::1", server.port(), 20);
  const auto got = client.get("/over/v6");
  ASSERT_TRUE(got) << client.error();
  EXPECT_EQ(got->body, "/over/v6");
  server.stop();
  runner.join();
}

TEST(HttpServer, StopBeforeRunAndPortInUse) {
  HttpServer server(
      {.port = 0, .threads = 1, .max_body_bytes = 10},
      [](const HttpRequest&) { return HttpResponse{}; }, refuse);
  server.stop();
  server.run();  // returns at once
  HttpServer first(
      {.port = 0, .threads = 1, .max_body_bytes = 10},
      [](const HttpRequest&) { return HttpResponse{}; }, refuse);
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>([&] {
                HttpServer(
                    {.port = first.port(), .threads = 1, .max_body_bytes = 10},
                    [](const HttpRequest&) { return HttpResponse{}; }, refuse);
              }),
              HasSubstr("cannot listen on 127.0.0.1:" + std::to_string(first.port())));
}

}  // namespace
}  // namespace recemb::serve

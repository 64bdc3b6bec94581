// A small HTTP/1.1 client for the tests of `recemb serve`: one keep-alive connection (opened on
// first use, and again after the server closed it), requests with a Content-Length body, answers
// read by their Content-Length (what the server sends). Every wait is bounded by the timeout.
//
//   recemb::test::HttpClient client("127.0.0.1", port);
//   std::optional<HttpAnswer> answer = client.post("/v1/models/m:lookup", body,
//   "application/json"); if (!answer) ADD_FAILURE() << client.error();   // connecting, sending or
//   receiving failed
#ifndef RECEMB_TESTS_TESTING_HTTP_CLIENT_H_
#define RECEMB_TESTS_TESTING_HTTP_CLIENT_H_

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <netdb.h>
#include <optional>
#include <poll.h>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <unistd.h>

namespace recemb::test {

struct HttpAnswer {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;

  // The value of header `name` (any case), "" when absent.
  std::string header(std::string_view name) const {
    std::string lower(name);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto found = headers.find(lower);
    return found == headers.end() ? std::string() : found->second;
  }
};

class HttpClient {
 public:
  HttpClient(std::string host, int port, int timeout_seconds = 30)
      : host_(std::move(host)), port_(port), timeout_ms_(timeout_seconds * 1000) {}
  ~HttpClient() { disconnect(); }
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  std::optional<HttpAnswer> get(std::string_view path) { return request("GET", path, "", ""); }
  std::optional<HttpAnswer> post(std::string_view path, std::string_view body,
                                 std::string_view content_type) {
    return request("POST", path, body, content_type);
  }
  // One request and its answer; nullopt (error() says why) when connecting, sending or receiving
  // failed or timed out. A request on a connection the server closed is sent again once, on a new
  // one.
  std::optional<HttpAnswer> request(std::string_view method, std::string_view path,
                                    std::string_view body, std::string_view content_type) {
    std::string message = std::string(method) + " " + std::string(path) +
                          " HTTP/1.1\r\nHost: " + host_ +
                          "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    if (!content_type.empty()) message += "Content-Type: " + std::string(content_type) + "\r\n";
    message += "\r\n";
    message += body;
    for (int attempt = 0; attempt < 2; ++attempt) {
      const bool reused = socket_ >= 0;
      if (!reused && !connect_socket()) return std::nullopt;
      if (send_all(message)) {
        std::optional<HttpAnswer> answer = receive();
        if (answer) return answer;
      }
      disconnect();
      if (!reused) return std::nullopt;  // a new connection failed: no second try
    }
    return std::nullopt;
  }

  const std::string& error() const { return error_; }

 private:
  bool fail(const std::string& what) {
    error_ = what + (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string());
    return false;
  }

  bool connect_socket() {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    errno = 0;
    if (getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found) != 0) {
      return fail("cannot resolve " + host_);
    }
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      freeaddrinfo(found);
      return fail("socket");
    }
    const int connected = ::connect(fd, found->ai_addr, found->ai_addrlen);
    freeaddrinfo(found);
    if (connected != 0 && errno != EINPROGRESS) {
      ::close(fd);
      return fail("connect");
    }
    socket_ = fd;
    if (!wait_for(POLLOUT)) return false;
    int status = 0;
    socklen_t size = sizeof status;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &status, &size);
    if (status != 0) {
      errno = status;
      disconnect();
      return fail("connect");
    }
    buffer_.clear();
    return true;
  }

  void disconnect() {
    if (socket_ >= 0) ::close(socket_);
    socket_ = -1;
    buffer_.clear();
  }

  // Waits until the socket is ready for `events` (within the timeout).
  bool wait_for(short events) {
    pollfd entry{.fd = socket_, .events = events, .revents = 0};
    errno = 0;
    const int ready = ::poll(&entry, 1, timeout_ms_);
    if (ready > 0) return true;
    if (ready == 0) errno = ETIMEDOUT;
    const bool ok = fail(ready == 0 ? "timed out" : "poll");
    disconnect();
    return ok;
  }

  bool send_all(std::string_view data) {
    while (!data.empty()) {
      if (!wait_for(POLLOUT)) return false;
      const ssize_t sent = ::send(socket_, data.data(), data.size(), MSG_NOSIGNAL);
      if (sent < 0 && errno != EAGAIN && errno != EINTR) return fail("send");
      if (sent > 0) data.remove_prefix(static_cast<size_t>(sent));
    }
    return true;
  }

  // Appends what arrives to buffer_; false on a timeout, an error or the end of the connection.
  bool receive_some() {
    if (!wait_for(POLLIN)) return false;
    char chunk[65536];
    const ssize_t got = ::recv(socket_, chunk, sizeof chunk, 0);
    if (got > 0) {
      buffer_.append(chunk, static_cast<size_t>(got));
      return true;
    }
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    errno = got == 0 ? ECONNRESET : errno;
    return fail(got == 0 ? "the server closed the connection" : "recv");
  }

  std::optional<HttpAnswer> receive() {
    size_t end = 0;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!receive_some()) return std::nullopt;
    }
    HttpAnswer answer;
    const std::string head = buffer_.substr(0, end);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.size() < 12 || status_line.compare(0, 5, "HTTP/") != 0) {
      errno = 0;
      fail("not an HTTP answer: '" + status_line + "'");
      return std::nullopt;
    }
    answer.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos && line_end < head.size()) {
      const size_t next = head.find("\r\n", line_end + 2);
      const std::string line = head.substr(line_end + 2, next - line_end - 2);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        const size_t value = line.find_first_not_of(' ', colon + 1);
        answer.headers[name] = value == std::string::npos ? "" : line.substr(value);
      }
      line_end = next;
    }
    const std::string length_text = answer.header("Content-Length");
    const size_t length = length_text.empty() ? 0 : std::stoul(length_text);
    while (buffer_.size() < end + 4 + length) {
      if (!receive_some()) return std::nullopt;
    }
    answer.body = buffer_.substr(end + 4, length);
    buffer_.erase(0, end + 4 + length);
    if (answer.header("Connection") == "close") disconnect();
    return answer;
  }

  std::string host_;
  int port_;
  int timeout_ms_;
  int socket_ = -1;
  std::string buffer_;  // received, not yet consumed
  std::string error_;
};

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_HTTP_CLIENT_H_

// serve_load: a closed-loop load client of `recemb serve` (docs/serving.md, "Load"). It trains and
// exports the trainer's default model (`recemb train --steps 1`, `recemb export --dtype int8`: 26
// features, int8) into a fresh directory, starts `recemb serve` on it (127.0.0.1, port 0), and
// for each body format and number of clients C sends lookups of --examples examples x 26
// features from C keep-alive HTTP/1.1 connections driven by one thread (epoll; each connection
// sends its next request when its answer has come), then stops the server with SIGTERM.
//
//   build/release/bench/serve_load build/release/bin/recemb                 # the matrix
//   build/release/bench/serve_load build/release/bin/recemb --clients 8 --requests 500
//       --json-requests 100 --runs 1 --warmup 0 --check-all                 # the CI run
//
// Requests are encoded once, before any is sent (16 bodies of random ids, cycled); of an answer
// only the status line and Content-Length are parsed, and its body is compared with the expected
// answer (the lookup of the same ids in this process, encoded as docs/serving.md specifies) the
// first time each body is answered, or every time with --check-all. A status other than 200, a
// wrong answer, a connection closed mid-answer or a run over --seconds fails (exit 1). A
// connection the server closes between answers is reopened and the request sent again.
//
// Output: per run, requests/s, latency percentiles (from a request's first byte sent to its
// answer's last byte received) and the CPU time the server (/proc/PID/stat) and this client used
// a request; then, per format and C, the medians of the runs as a markdown table.
#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <random>
#include <regex>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <string>
#include <string_view>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "recemb/recemb.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The binary layouts' magic numbers and version (docs/serving.md, "Lookup, binary").
constexpr uint32_t kRequestMagic = 0x51424552;  // "REBQ"
constexpr uint32_t kAnswerMagic = 0x41424552;   // "REBA"
constexpr uint32_t kBinaryVersion = 2;
constexpr int kDistinctBodies = 16;
constexpr const char* kModelName = "ctr";

// What fail() cleans up: the server started, the directory of the model.
pid_t g_server = 0;
fs::path g_work;

[[noreturn]] void fail(const std::string& message) {
  std::cerr << "serve_load: " << message << "\n";
  if (g_server != 0) kill(g_server, SIGKILL);
  if (!g_work.empty()) {
    std::error_code ignored;
    fs::remove_all(g_work, ignored);
  }
  std::exit(1);
}

struct Options {
  std::string recemb;
  std::vector<int> clients = {1, 8, 64};
  std::vector<std::string> formats = {"binary", "json"};
  int64_t requests = 20000;      // per run of binary lookups
  int64_t json_requests = 2000;  // per run of JSON lookups (each costs the server 30x more)
  int64_t warmup = 2000;         // requests per format before its runs, not measured
  double seconds = 60;           // the limit of one run
  int runs = 3;
  int examples = 64;
  int threads = 0;  // recemb serve --threads; 0: its default
  bool check_all = false;
};

const char* const kUsage =
    "usage: serve_load RECEMB [--clients 1,8,64] [--formats binary,json] [--requests N]\n"
    "                  [--json-requests N] [--warmup N] [--seconds S] [--runs R]\n"
    "                  [--examples E] [--threads T]\n"
    "                  [--check-all]\n";

template <typename T>
T number(const std::string& text, const std::string& flag) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || ptr != end || value <= 0) {
    fail(flag + " takes a positive number, got '" + text + "'\n" + kUsage);
  }
  return value;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, ',');) parts.push_back(part);
  return parts;
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--check-all") {
      options.check_all = true;
      continue;
    }
    if (!flag.starts_with("--")) {
      if (!options.recemb.empty()) fail("one recemb binary, got '" + flag + "' too\n" + kUsage);
      options.recemb = flag;
      continue;
    }
    if (i + 1 == argc) fail(flag + " needs a value\n" + kUsage);
    const std::string value = argv[++i];
    if (flag == "--clients") {
      options.clients.clear();
      for (const std::string& c : split(value)) options.clients.push_back(number<int>(c, flag));
    } else if (flag == "--formats") {
      options.formats = split(value);
      for (const std::string& format : options.formats) {
        if (format != "binary" && format != "json") {
          fail("--formats takes binary and/or json, got '" + format + "'");
        }
      }
    } else if (flag == "--requests") {
      options.requests = number<int64_t>(value, flag);
    } else if (flag == "--json-requests") {
      options.json_requests = number<int64_t>(value, flag);
    } else if (flag == "--warmup") {
      options.warmup = value == "0" ? 0 : number<int64_t>(value, flag);
    } else if (flag == "--seconds") {
      options.seconds = number<double>(value, flag);
    } else if (flag == "--runs") {
      options.runs = number<int>(value, flag);
    } else if (flag == "--examples") {
      options.examples = number<int>(value, flag);
    } else if (flag == "--threads") {
      options.threads = number<int>(value, flag);
    } else {
      fail("unknown option " + flag + "\n" + kUsage);
    }
  }
  if (options.recemb.empty()) fail(std::string("no recemb binary\n") + kUsage);
  return options;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Starts `argv` with its stdout and stderr appended to `log`.
pid_t spawn(const std::vector<std::string>& argv, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) fail("cannot start " + argv[0] + ": " + std::strerror(error));
  return pid;
}

// The exit status of `pid` once it ends; kills it and fails after `seconds`.
int wait_for(pid_t pid, double seconds, const std::string& what, const fs::path& log) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fail(what + " did not end within " + std::to_string(seconds) + " s; its log:\n" +
           read_text(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status;
}

void run_to_end(const std::vector<std::string>& argv, const fs::path& log) {
  const int status = wait_for(spawn(argv, log), 300, argv[0] + " " + argv[1], log);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fail(argv[0] + " " + argv[1] + " failed; its log:\n" + read_text(log));
  }
}

// The lookups sent (whole HTTP requests) and the answer bodies expected, one per body.
struct Workload {
  std::string format;
  std::vector<std::string> requests;
  std::vector<std::string> answers;
};

template <typename T>
void append_raw(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// `values` nested as lists of `shape` (the JSON answer: floats as %.9g, ", " between items).
void append_json_values(std::string& out, const float* values, const int64_t* shape, size_t rank) {
  out += '[';
  int64_t inner = 1;
  for (size_t d = 1; d < rank; ++d) inner *= shape[d];
  for (int64_t i = 0; i < shape[0]; ++i) {
    if (i > 0) out += ", ";
    if (rank == 1) {
      char number[32];
      const int length = std::snprintf(number, sizeof number, "%.9g", double{values[i]});
      out.append(number, static_cast<size_t>(length));
    } else {
      append_json_values(out, values + i * inner, shape + 1, rank - 1);
    }
  }
  out += ']';
}

// The fingerprint of the model's features a binary body carries, computed as docs/serving.md
// ("Lookup, binary") specifies it (a client would read it from GET /v1/models/NAME).
uint64_t feature_fingerprint(const recemb::ServingModel& model) {
  std::string bytes;
  for (const recemb::FeatureConfig& feature : model.features()) {
    append_raw(bytes, uint64_t{feature.name.size()});
    bytes += feature.name;
    bytes += model.is_dynamic(feature.table) ? '\1' : '\0';
  }
  return static_cast<uint64_t>(recemb::string_key(bytes));
}

Workload make_workload(const recemb::ServingModel& model, const std::string& format, int examples,
                       uint64_t seed) {
  const auto& features = model.features();
  std::mt19937_64 random(seed);
  Workload workload{.format = format, .requests = {}, .answers = {}};
  std::vector<int64_t> row_splits(static_cast<size_t>(examples) + 1);
  for (int e = 0; e <= examples; ++e) row_splits[static_cast<size_t>(e)] = e;
  for (int b = 0; b < kDistinctBodies; ++b) {
    // One id per example and feature, uniform over the feature's table.
    std::vector<std::vector<int64_t>> ids(features.size());
    std::vector<recemb::FeatureInput> inputs;
    for (size_t f = 0; f < features.size(); ++f) {
      if (model.is_dynamic(features[f].table)) {
        fail("feature '" + features[f].name + "' has a dynamic table: expected the trainer's " +
             "default (hashed) model");
      }
      int64_t vocabulary = 0;
      for (const recemb::TableConfig& table : model.tables()) {
        if (table.name == features[f].table) vocabulary = table.vocabulary_size;
      }
      std::uniform_int_distribution<int64_t> id(0, vocabulary - 1);
      for (int e = 0; e < examples; ++e) ids[f].push_back(id(random));
      inputs.emplace_back(recemb::DenseIds{
          .ids = std::span<const int64_t>(ids[f]), .shape = {examples}, .weights = {}});
    }
    std::vector<std::vector<int64_t>> shapes(features.size());
    std::vector<std::vector<float>> values(features.size());
    std::vector<std::span<float>> spans;
    for (size_t f = 0; f < features.size(); ++f) {
      shapes[f] = model.activation_shape(f, inputs[f]);
      int64_t size = 1;
      for (int64_t extent : shapes[f]) size *= extent;
      values[f].resize(static_cast<size_t>(size));
      spans.emplace_back(values[f]);
    }
    model.lookup(inputs, spans);

    std::string body, answer;
    if (format == "binary") {
      for (uint32_t word : {kRequestMagic, kBinaryVersion, uint32_t(features.size()), 0u}) {
        append_raw(body, word);
      }
      append_raw(body, feature_fingerprint(model));
      for (uint32_t word : {kAnswerMagic, kBinaryVersion, uint32_t(features.size()), 0u}) {
        append_raw(answer, word);
      }
      append_raw(answer, feature_fingerprint(model));
      for (size_t f = 0; f < features.size(); ++f) {
        append_raw(body, int64_t{examples});
        append_raw(body, int64_t{examples});  // total ids
        append_raw(body, uint32_t{0});        // no weights
        append_raw(body, uint32_t{0});
        body.append(reinterpret_cast<const char*>(row_splits.data()),
                    row_splits.size() * sizeof(int64_t));
        body.append(reinterpret_cast<const char*>(ids[f].data()), ids[f].size() * sizeof(int64_t));
        append_raw(answer, uint32_t(shapes[f].size()));
        append_raw(answer, uint32_t{0});
        answer.append(reinterpret_cast<const char*>(shapes[f].data()),
                      shapes[f].size() * sizeof(int64_t));
        answer.append(reinterpret_cast<const char*>(values[f].data()),
                      values[f].size() * sizeof(float));
      }
    } else {
      body = "{\"inputs\": {";
      answer = "{\"outputs\": {";
      for (size_t f = 0; f < features.size(); ++f) {
        const std::string key = (f == 0 ? "\"" : ", \"") + features[f].name + "\": ";
        body += key + "[";
        for (int e = 0; e < examples; ++e) {
          body += (e == 0 ? "" : ", ") + std::to_string(ids[f][static_cast<size_t>(e)]);
        }
        body += "]";
        answer += key;
        append_json_values(answer, values[f].data(), shapes[f].data(), shapes[f].size());
      }
      body += "}}";
      answer += "}}";
    }
    workload.requests.push_back(
        std::string("POST /v1/models/") + kModelName +
        ":lookup HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " +
        (format == "binary" ? "application/octet-stream" : "application/json") +
        "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    workload.answers.push_back(std::move(answer));
  }
  return workload;
}

// A started `recemb serve`, stopped (SIGTERM) and waited for by stop().
class ServeProcess {
 public:
  ServeProcess(const Options& options, const fs::path& models, const fs::path& log) : log_(log) {
    std::vector<std::string> argv = {options.recemb, "serve", models.string(), "--listen",
                                     "127.0.0.1:0"};
    if (options.threads > 0) {
      argv.push_back("--threads");
      argv.push_back(std::to_string(options.threads));
    }
    pid_ = spawn(argv, log);
    g_server = pid_;
    const std::regex listening(R"(listening on 127\.0\.0\.1:(\d+))");
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (port_ == 0) {
      std::smatch match;
      const std::string text = read_text(log);
      if (std::regex_search(text, match, listening)) {
        port_ = std::stoi(match[1]);
        break;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) fail("recemb serve ended; its log:\n" + text);
      if (Clock::now() > deadline) {
        stop();
        fail("recemb serve did not listen within 60 s; its log:\n" + text);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~ServeProcess() { stop(); }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  int port() const { return port_; }

  // The CPU time the server has used so far (user and system, all its threads), in seconds.
  double cpu_seconds() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    // Fields after the command (in parentheses, which may hold spaces): state is field 3, utime
    // field 14 and stime field 15.
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));
    std::string field;
    double ticks = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i >= 14) ticks += std::stod(field);
    }
    return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
  }

  // SIGTERM, then its exit (within 30 s: it closes idle keep-alive connections within 5 s).
  void stop() {
    if (pid_ == 0) return;
    kill(pid_, SIGTERM);
    const int status = wait_for(pid_, 30, "recemb serve (after SIGTERM)", log_);
    pid_ = 0;
    g_server = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fail("recemb serve did not exit 0 after SIGTERM; its log:\n" + read_text(log_));
    }
  }

 private:
  fs::path log_;
  pid_t pid_ = 0;
  int port_ = 0;
};

struct RunResult {
  int64_t answered = 0;
  double seconds = 0;
  double server_cpu_seconds = 0;
  double client_cpu_seconds = 0;
  int64_t reconnects = 0;
  std::vector<double> latencies_ms = {};
};

// One connection's request in flight.
struct Connection {
  int fd = -1;
  size_t body = 0;  // the index of the request in flight
  size_t sent = 0;  // bytes of it sent
  bool writing = false;
  std::string header = {};  // the answer's status line and headers, until the empty line
  bool in_body = false;
  int status = 0;
  size_t content_length = 0;
  size_t received = 0;  // bytes of the body received
  bool close_after = false;
  bool check = false;
  std::string error_body = {};  // the body of an answer that is not 200
  int retries = 0;              // sends of this request on a connection closed before answering
  Clock::time_point start = {};
};

class LoadRun {
 public:
  LoadRun(int port, const Workload& workload, std::vector<bool>& checked, bool check_all)
      : port_(port), workload_(workload), checked_(checked), check_all_(check_all) {
    epoll_ = epoll_create1(0);
    if (epoll_ < 0) fail(std::string("epoll_create1: ") + std::strerror(errno));
  }
  ~LoadRun() {
    for (Connection& connection : connections_) {
      if (connection.fd >= 0) close(connection.fd);
    }
    close(epoll_);
  }
  LoadRun(const LoadRun&) = delete;
  LoadRun& operator=(const LoadRun&) = delete;

  RunResult run(int clients, int64_t requests, double seconds) {
    RunResult result;
    result.latencies_ms.reserve(static_cast<size_t>(requests));
    connections_.resize(static_cast<size_t>(std::min<int64_t>(clients, requests)));
    const auto begin = Clock::now();
    const auto deadline = begin + std::chrono::duration<double>(seconds);
    for (Connection& connection : connections_) {
      open(connection);
      issue(connection);
    }
    std::vector<epoll_event> events(connections_.size());
    while (result.answered < requests) {
      const int ready = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 100);
      if (ready < 0 && errno != EINTR) fail(std::string("epoll_wait: ") + std::strerror(errno));
      for (int i = 0; i < ready; ++i) {
        Connection& connection = connections_[events[static_cast<size_t>(i)].data.u64];
        if (connection.writing) {
          send_more(connection);
        } else if (receive(connection, result)) {
          if (issued_ < requests) {
            issue(connection);
          } else {
            close(connection.fd);
            connection.fd = -1;
          }
        }
      }
      if (Clock::now() > deadline) {
        fail("timeout: " + std::to_string(result.answered) + " of " + std::to_string(requests) +
             " requests answered in " + std::to_string(seconds) + " s (--seconds)");
      }
    }
    result.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    result.reconnects = reconnects_;
    return result;
  }

 private:
  void open(Connection& connection) {
    if (connection.fd >= 0) close(connection.fd);
    connection.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port_));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connection.fd < 0 ||
        connect(connection.fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      fail("cannot connect to 127.0.0.1:" + std::to_string(port_) + ": " + std::strerror(errno));
    }
    const int on = 1;
    setsockopt(connection.fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    const int flags = fcntl(connection.fd, F_GETFL);
    fcntl(connection.fd, F_SETFL, flags | O_NONBLOCK);
    epoll_event event{.events = EPOLLIN, .data = {.u64 = index_of(connection)}};
    epoll_ctl(epoll_, EPOLL_CTL_ADD, connection.fd, &event);
  }

  uint64_t index_of(const Connection& connection) const {
    return static_cast<uint64_t>(&connection - connections_.data());
  }

  // Sends the next request on `connection`.
  void issue(Connection& connection) {
    connection.body = static_cast<size_t>(issued_++ % kDistinctBodies);
    connection.start = Clock::now();
    connection.retries = 0;
    start_sending(connection);
  }

  void start_sending(Connection& connection) {
    connection.sent = 0;
    connection.header.clear();
    connection.in_body = false;
    connection.received = 0;
    connection.error_body.clear();
    send_more(connection);
  }

  void watch_writable(Connection& connection, bool writable) {
    if (connection.writing == writable) return;
    connection.writing = writable;
    epoll_event event{.events = writable ? uint32_t{EPOLLOUT} : uint32_t{EPOLLIN},
                      .data = {.u64 = index_of(connection)}};
    epoll_ctl(epoll_, EPOLL_CTL_MOD, connection.fd, &event);
  }

  void send_more(Connection& connection) {
    const std::string& request = workload_.requests[connection.body];
    while (connection.sent < request.size()) {
      const ssize_t sent = send(connection.fd, request.data() + connection.sent,
                                request.size() - connection.sent, MSG_NOSIGNAL);
      if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        watch_writable(connection, true);
        return;
      }
      if (sent < 0) {  // the server closed the connection: its answer (if any) says why
        break;
      }
      connection.sent += static_cast<size_t>(sent);
    }
    watch_writable(connection, false);
  }

  // The server closed `connection` before answering: reopen it and send the request again.
  void resend(Connection& connection) {
    if (++connection.retries > 3) {
      fail("the server closed the connection before answering, 3 times for one request");
    }
    ++reconnects_;
    open(connection);
    connection.writing = false;
    start_sending(connection);
  }

  // Reads what has come on `connection`; true once its answer is complete (and checked).
  bool receive(Connection& connection, RunResult& result) {
    while (true) {
      const ssize_t got = recv(connection.fd, buffer_.data(), buffer_.size(), 0);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
      if (got <= 0) {
        if (connection.header.empty() && !connection.in_body) {
          resend(connection);
          return false;
        }
        fail("the server closed a connection mid-answer" +
             (got < 0 ? std::string(": ") + std::strerror(errno) : std::string()));
      }
      std::string_view data(buffer_.data(), static_cast<size_t>(got));
      if (!connection.in_body) {
        const size_t before = connection.header.size();
        connection.header.append(data);
        const size_t end = connection.header.find("\r\n\r\n", before >= 3 ? before - 3 : 0);
        if (end == std::string::npos) continue;
        data = data.substr(end + 4 - before);
        connection.header.resize(end + 2);
        parse_header(connection);
      }
      if (connection.received + data.size() > connection.content_length) {
        fail("the server sent more than its Content-Length " +
             std::to_string(connection.content_length));
      }
      if (connection.status != 200) {
        connection.error_body.append(data);
      } else if (connection.check &&
                 std::memcmp(workload_.answers[connection.body].data() + connection.received,
                             data.data(), data.size()) != 0) {
        fail("a " + workload_.format + " answer differs from the expected answer (the lookup " +
             "in this process) in bytes " + std::to_string(connection.received) + " to " +
             std::to_string(connection.received + data.size()));
      }
      connection.received += data.size();
      if (connection.received < connection.content_length) continue;
      if (connection.status != 200) {
        fail("status " + std::to_string(connection.status) + ": " +
             connection.error_body.substr(0, 1000));
      }
      if (connection.check) checked_[connection.body] = true;
      result.latencies_ms.push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - connection.start).count());
      ++result.answered;
      if (connection.close_after) {
        ++reconnects_;
        open(connection);
        connection.writing = false;
      }
      return true;
    }
  }

  void parse_header(Connection& connection) {
    std::string& header = connection.header;
    constexpr std::string_view kHttp = "HTTP/1.1 ";
    if (!header.starts_with(kHttp) || header.size() < kHttp.size() + 3) {
      fail("not an HTTP/1.1 answer: " + header.substr(0, 200));
    }
    connection.status = std::atoi(header.c_str() + kHttp.size());
    std::transform(header.begin(), header.end(), header.begin(),
                   [](char c) { return static_cast<char>(std::tolower(c)); });
    const size_t length = header.find("\r\ncontent-length:");
    if (length == std::string::npos) fail("an answer without Content-Length: " + header);
    connection.content_length =
        static_cast<size_t>(std::atoll(header.c_str() + length + sizeof "\r\ncontent-length:" - 1));
    connection.close_after = header.find("\r\nconnection: close\r\n") != std::string::npos;
    connection.in_body = true;
    connection.check = connection.status == 200 && (check_all_ || !checked_[connection.body]);
    const size_t expected = workload_.answers[connection.body].size();
    if (connection.status == 200 && connection.content_length != expected) {
      fail("a " + workload_.format + " answer of " + std::to_string(connection.content_length) +
           " bytes, expected " + std::to_string(expected));
    }
  }

  int port_;
  const Workload& workload_;
  std::vector<bool>& checked_;
  bool check_all_;
  int epoll_ = -1;
  std::vector<Connection> connections_;
  std::vector<char> buffer_ = std::vector<char>(1 << 20);
  int64_t issued_ = 0;
  int64_t reconnects_ = 0;
};

// The nearest-rank percentile of sorted `values`.
double percentile(const std::vector<double>& sorted, double p) {
  const auto rank = static_cast<size_t>(std::ceil(p / 100 * static_cast<double>(sorted.size())));
  return sorted[std::max<size_t>(rank, 1) - 1];
}

struct Figures {
  double requests_per_second, p50, p90, p99, max;
  double server_us, client_us;  // CPU time per request
};

Figures figures_of(RunResult& run) {
  std::sort(run.latencies_ms.begin(), run.latencies_ms.end());
  const auto answered = static_cast<double>(run.answered);
  return {answered / run.seconds,
          percentile(run.latencies_ms, 50),
          percentile(run.latencies_ms, 90),
          percentile(run.latencies_ms, 99),
          run.latencies_ms.back(),
          run.server_cpu_seconds / answered * 1e6,
          run.client_cpu_seconds / answered * 1e6};
}

// This process's CPU time so far, in seconds.
double client_cpu_seconds() {
  timespec time{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time);
  return static_cast<double>(time.tv_sec) + static_cast<double>(time.tv_nsec) * 1e-9;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  char pattern[] = "/tmp/serve_load.XXXXXX";
  if (mkdtemp(pattern) == nullptr) fail(std::string("mkdtemp: ") + std::strerror(errno));
  const fs::path work = pattern;
  g_work = work;
  const fs::path models = work / "models";
  std::cout << "serve_load: the trainer's default model (recemb train --steps 1, recemb export "
               "--dtype int8) in "
            << work.string() << std::endl;
  run_to_end({options.recemb, "train", "--steps", "1", "--set", "train.eval_every=0", "--output",
              (work / "run").string()},
             work / "train.log");
  run_to_end({options.recemb, "export", "--dtype", "int8", (work / "run" / "checkpoints").string(),
              (models / kModelName / "1").string()},
             work / "export.log");
  const recemb::ServingModel model =
      recemb::ServingModel::open(models / kModelName / "1" / "model.recemb");
  std::vector<Workload> workloads;
  for (const std::string& format : options.formats) {
    workloads.push_back(make_workload(model, format, options.examples, 23));
  }

  std::ostringstream table;
  table << "| body | clients | requests/s | p50 ms | p90 ms | p99 ms | max ms | server CPU us a "
           "request | client CPU us a request |\n"
        << "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  {
    ServeProcess server(options, models, work / "serve.log");
    std::cout << "serve_load: recemb serve on 127.0.0.1:" << server.port() << ", "
              << options.examples << " examples x " << model.features().size()
              << " features a request, " << options.requests << " binary and "
              << options.json_requests << " JSON requests a run" << std::endl;
    for (const Workload& workload : workloads) {
      const int64_t requests =
          workload.format == "binary" ? options.requests : options.json_requests;
      std::vector<bool> checked(kDistinctBodies, false);
      if (options.warmup > 0) {
        LoadRun(server.port(), workload, checked, options.check_all)
            .run(8, std::min(options.warmup, requests), options.seconds);
      }
      for (int clients : options.clients) {
        std::vector<Figures> runs;
        for (int r = 0; r < options.runs; ++r) {
          const double server_cpu = server.cpu_seconds();
          const double client_cpu = client_cpu_seconds();
          RunResult result = LoadRun(server.port(), workload, checked, options.check_all)
                                 .run(clients, requests, options.seconds);
          result.server_cpu_seconds = server.cpu_seconds() - server_cpu;
          result.client_cpu_seconds = client_cpu_seconds() - client_cpu;
          const Figures f = figures_of(result);
          runs.push_back(f);
          std::printf(
              "%-6s C=%-3d run %d: %lld requests in %.2f s: %.0f requests/s, p50 %.3f ms, p90 "
              "%.3f ms, p99 %.3f ms, max %.3f ms; CPU a request: server %.0f us, client %.0f us "
              "(%lld reconnects)\n",
              workload.format.c_str(), clients, r + 1, static_cast<long long>(result.answered),
              result.seconds, f.requests_per_second, f.p50, f.p90, f.p99, f.max, f.server_us,
              f.client_us, static_cast<long long>(result.reconnects));
          std::fflush(stdout);
        }
        const auto med = [&runs](double Figures::*field) {
          std::vector<double> values;
          for (const Figures& f : runs) values.push_back(f.*field);
          return median(values);
        };
        char row[256];
        std::snprintf(row, sizeof row,
                      "| %s | %d | %.0f | %.3f | %.3f | %.3f | %.3f | %.0f | %.0f |\n",
                      workload.format.c_str(), clients, med(&Figures::requests_per_second),
                      med(&Figures::p50), med(&Figures::p90), med(&Figures::p99),
                      med(&Figures::max), med(&Figures::server_us), med(&Figures::client_us));
        table << row;
      }
      if (std::find(checked.begin(), checked.end(), false) != checked.end()) {
        fail("not every body's answer was checked (fewer requests than " +
             std::to_string(kDistinctBodies) + "?)");
      }
    }
    server.stop();
  }
  std::cout << "\nmedians of " << options.runs << " runs:\n" << table.str();
  fs::remove_all(work);
  return 0;
}

#include "serve/http_server.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <malloc.h>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>

#include "recemb/error.h"

namespace recemb::serve {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

class Session;

constexpr size_t kReadBytes = 64 << 10;  // the most Beast reads at once

std::string text(boost::beast::string_view view) { return {view.data(), view.size()}; }

// The listening socket, the event loops and the open connections. Each loop is run by a thread of
// its own and serves the connections given to it in turn: a connection's operations run on one
// thread, one at a time, with no lock (nor strand) between them.
struct Listener {
  // Declared before the event loops: the handlers they still hold when destroyed end sessions,
  // which leave `sessions`.
  std::function<HttpResponse(const HttpRequest&)> handler;
  std::function<HttpResponse(const HttpRefusal&)> refusal;
  uint64_t max_body_bytes = 0;
  uint64_t max_buffered_bytes = 0;
  std::atomic<uint64_t> buffered_bytes{0};  // of the bodies held now (Session::reserve)
  int read_timeout_seconds = 0;
  Clock::duration read_timeout{};
  std::mutex sessions_mutex;
  std::unordered_set<Session*> sessions;  // the open connections, for stop()
  std::atomic<bool> stopped{false};
  std::vector<std::unique_ptr<asio::io_context>> loops;  // loops[0] accepts too
  // The loops but the first have no work of their own until given a connection: kept running.
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> idle_loops_kept;
  std::optional<tcp::acceptor> acceptor;  // on loops[0]
  size_t next_loop = 0;                   // the loop of the next connection
  int port = 0;
  std::ostream* log = nullptr;
  // While accepting fails for lack of file descriptors or memory: the wait before the next try
  // (zero otherwise), on `accept_retry`, a timer of loops[0].
  Clock::duration accept_backoff{};
  std::optional<
      asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, asio::io_context::executor_type>>
      accept_retry;

  void accept();
  void close_everything();
};

// One connection: reads a request, answers it with the handler (on its loop's thread), writes the
// answer, and again while the client keeps the connection alive. stop() reaches it through its
// loop too.
class Session : public std::enable_shared_from_this<Session> {
 public:
  using Socket = tcp::socket::rebind_executor<asio::io_context::executor_type>::other;

  Session(Listener& server, Socket socket)
      : server_(server), socket_(std::move(socket)), timer_(socket_.get_executor()) {
    std::lock_guard lock(server_.sessions_mutex);
    server_.sessions.insert(this);
  }
  ~Session() {
    release();
    std::lock_guard lock(server_.sessions_mutex);
    server_.sessions.erase(this);
  }

  void start() {
    // Reads take what room the buffer has, at least 512 bytes, at most 64 KiB: room for a whole
    // binary request of 64 examples x 26 features (13 KB) in one read, not 26.
    buffer_.reserve(kReadBytes);
    read_request();
    watch_deadline();
  }

  asio::io_context::executor_type executor() { return socket_.get_executor(); }

  // From stop(), on its loop: a connection waiting for a request that has not begun is closed, and
  // so is one refused; one reading or writing a request is closed after its answer.
  void stop() {
    stopping_ = true;
    if ((phase_ == Phase::kReading && !request_begun()) || phase_ == Phase::kDraining) close();
  }

 private:
  enum class Phase { kReading, kWriting, kDraining, kClosed };
  // What follows an answer.
  enum class Then { kNextRequest, kClose, kDrainAndClose };

  bool request_begun() const { return buffer_.size() > 0 || (parser_ && parser_->got_some()); }

  // Counts `bytes` more of this request's body against the bytes of bodies held at once; false,
  // counting nothing, when they would go beyond max_buffered_bytes.
  bool reserve(uint64_t bytes) {
    uint64_t held = server_.buffered_bytes.load(std::memory_order_relaxed);
    do {
      if (bytes > server_.max_buffered_bytes || held > server_.max_buffered_bytes - bytes) {
        return false;
      }
    } while (!server_.buffered_bytes.compare_exchange_weak(held, held + bytes,
                                                           std::memory_order_relaxed));
    reserved_ += bytes;
    return true;
  }

  // The body counted by reserve is freed (answered, refused or closed).
  void release() {
    server_.buffered_bytes.fetch_sub(reserved_, std::memory_order_relaxed);
    reserved_ = 0;
  }

  HttpRefusal over_budget() const {
    return {503, "the request bodies held at once would take more than --max-buffered-bytes " +
                     std::to_string(server_.max_buffered_bytes) +
                     " bytes (the server is busy with other large requests): retry later"};
  }

  // A header section over kMaxHeaderBytes: 414 when its request line alone is (the parser has
  // not read a method and a target).
  HttpRefusal header_too_large() const {
    if (parser_->get().method_string().empty()) {
      return {414, "the request line (method, URL and version) is longer than " +
                       std::to_string(kMaxHeaderBytes) +
                       " bytes, the limit of a request's header section: send a shorter URL"};
    }
    return {431, "the request's header section is longer than " + std::to_string(kMaxHeaderBytes) +
                     " bytes (its limit): send fewer or shorter header fields"};
  }

  // A request begun but not received in full within the read timeout: what was missing.
  HttpRefusal timed_out() const {
    std::string missing = "its header section did not end (no empty line)";
    if (parser_ && parser_->is_header_done()) {
      const size_t received = parser_->get().body().size();
      if (const auto length = parser_->content_length_remaining(); parser_->chunked()) {
        missing = "its chunked body did not end (no last, empty chunk) after " +
                  std::to_string(received) + " bytes";
      } else {
        missing = "its body ended at " + std::to_string(received) + " bytes of Content-Length " +
                  std::to_string(received + length.value_or(0));
      }
    }
    return {408, "the request was not received in full within the read timeout of " +
                     std::to_string(server_.read_timeout_seconds) +
                     " s (from the connection or the previous answer): " + missing};
  }

  // The transfer codings of the request other than chunked (and identity, which is none).
  std::string unsupported_transfer_codings() const {
    std::string unsupported;
    const auto [begin, end] = parser_->get().equal_range(http::field::transfer_encoding);
    for (auto field = begin; field != end; ++field) {
      for (const boost::beast::string_view coding : http::token_list(field->value())) {
        if (!boost::beast::iequals(coding, "chunked") &&
            !boost::beast::iequals(coding, "identity")) {
          unsupported += (unsupported.empty() ? "" : ", ") + text(coding);
        }
      }
    }
    return unsupported;
  }

  // Answers `refusal` and closes the connection (after reading what the client still sends).
  void refuse(const HttpRefusal& refusal) {
    release();
    write(server_.refusal(refusal), Then::kDrainAndClose);
  }

  // The read timeout bounds each wait for a request (headers and body, from when the previous
  // answer left) and each answer's write. The timer is not reset for every request: when it fires
  // before the deadline of the current phase, it waits again until then.
  void watch_deadline() {
    timer_.expires_at(deadline_);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code error) {
      if (error || self->phase_ == Phase::kClosed) return;
      if (Clock::now() < self->deadline_) {
        self->watch_deadline();
      } else if (self->phase_ == Phase::kReading && !self->timed_out_) {
        // The read ends (operation_aborted): refuse_or_close answers 408 or closes. (Still
        // reading at the next deadline: the read was lost to a failure, and the connection is
        // closed below.)
        self->timed_out_ = true;
        boost::system::error_code ignored;
        self->socket_.cancel(ignored);
        self->deadline_ = Clock::now() + self->server_.read_timeout;
        self->watch_deadline();
      } else {
        // A client not reading its answer, or still sending a refused request.
        self->close();
      }
    });
  }

  void read_request() {
    phase_ = Phase::kReading;
    deadline_ = Clock::now() + server_.read_timeout;
    parser_.emplace();
    over_budget_ = false;
    parser_->header_limit(static_cast<uint32_t>(kMaxHeaderBytes));
    parser_->body_limit(server_.max_body_bytes);
    parser_->on_chunk_header(count_chunk_);
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](boost::system::error_code error, size_t) {
                              self->on_header(error);
                            });
  }

  void on_header(boost::system::error_code error) {
    if (error) return refuse_or_close(error);
    if (const std::string codings = unsupported_transfer_codings(); !codings.empty()) {
      return refuse({501, "Transfer-Encoding '" + codings +
                              "': this server reads bodies as they are sent or chunked, in no "
                              "other transfer coding"});
    }
    // A body of a known length is held whole from now on (Beast reserves it); a chunked one is
    // counted chunk by chunk (count_chunk_).
    if (const auto length = parser_->content_length(); length && !reserve(*length)) {
      return refuse(over_budget());
    }
    // A client that waits for a go-ahead before sending its body (curl, for bodies over 1 KB).
    if (boost::beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      boost::system::error_code ignored;
      asio::write(socket_, asio::buffer(kContinue), ignored);  // a few bytes: never blocks
    }
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](boost::system::error_code body_error, size_t) {
                       if (body_error) return self->refuse_or_close(body_error);
                       self->answer();
                     });
  }

  // A read that failed: a request over a limit is refused naming it (503 for the bodies held at
  // once, 413 for the body, 414 and 431 for the header section), one not received in time with
  // 408, a malformed one with 400; a connection closed, or idle past the timeout, is closed.
  void refuse_or_close(boost::system::error_code error) {
    if (over_budget_) return refuse(over_budget());
    if (error == http::error::body_limit) {
      return refuse({413, "the body is longer than --max-body-bytes " +
                              std::to_string(server_.max_body_bytes)});
    }
    if (error == http::error::header_limit) return refuse(header_too_large());
    const bool closed = error == http::error::end_of_stream || error == asio::error::eof ||
                        error == asio::error::connection_reset;
    if (closed || phase_ == Phase::kClosed || (timed_out_ && !request_begun())) return close();
    if (timed_out_) return refuse(timed_out());
    if (error.category() == http::make_error_code(http::error::bad_method).category()) {
      return refuse({400, "a malformed HTTP request (" + error.message() + ")"});
    }
    close();
  }

  void answer() {
    http::request<http::string_body> request = parser_->release();
    const boost::beast::string_view target = request.target();
    const Then then = request.keep_alive() && !stopping_ ? Then::kNextRequest : Then::kClose;
    HttpResponse response;
    try {
      response = server_.handler({.method = text(request.method_string()),
                                  .path = text(target.substr(0, target.find('?'))),
                                  .content_type = text(request[http::field::content_type]),
                                  .body = std::move(request.body())});
    } catch (const std::exception&) {  // not even an answer (out of memory): the connection ends
      return close();
    }
    release();  // the body is freed with the request
    write(std::move(response), then);
  }

  void write(HttpResponse&& answer, Then then) {
    phase_ = Phase::kWriting;
    deadline_ = Clock::now() + server_.read_timeout;
    response_.result(static_cast<unsigned>(answer.status));
    response_.version(11);
    response_.set(http::field::content_type, answer.content_type);
    response_.body() = std::move(answer.body);  // not copied: answers are up to megabytes
    response_.keep_alive(then == Then::kNextRequest);
    response_.prepare_payload();
    http::async_write(socket_, response_,
                      [self = shared_from_this(), then](boost::system::error_code error, size_t) {
                        if (error) return self->close();
                        if (then == Then::kDrainAndClose) return self->drain();
                        if (then == Then::kClose || self->stopping_) return self->close();
                        self->response_ = {};
                        self->read_request();
                      });
  }

  // After a refusal: what the client still sends (the rest of a refused body) is read and dropped
  // until it closes its side, for read_timeout at most. Closing with bytes unread would reset the
  // connection, and the client could lose its answer before reading it.
  void drain() {
    if (phase_ != Phase::kDraining) {
      phase_ = Phase::kDraining;
      deadline_ = Clock::now() + server_.read_timeout;
      boost::system::error_code ignored;
      socket_.shutdown(tcp::socket::shutdown_send, ignored);
      buffer_.clear();
    }
    socket_.async_read_some(buffer_.prepare(kReadBytes),
                            [self = shared_from_this()](boost::system::error_code error, size_t) {
                              if (error) return self->close();
                              self->drain();
                            });
  }

  void close() {
    if (phase_ == Phase::kClosed) return;
    release();
    phase_ = Phase::kClosed;
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
    timer_.cancel();
  }

  Listener& server_;
  Socket socket_;
  asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, asio::io_context::executor_type>
      timer_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  Phase phase_ = Phase::kReading;
  Clock::time_point deadline_{};
  bool timed_out_ = false;
  bool stopping_ = false;
  uint64_t reserved_ = 0;     // bytes of the body counted in Listener::buffered_bytes
  bool over_budget_ = false;  // a chunk was refused: the body would go beyond the bytes held
  // The parser's callback at each chunk of a chunked body (it keeps a reference to it).
  std::function<void(uint64_t, boost::beast::string_view, boost::system::error_code&)>
      count_chunk_ =
          [this](uint64_t size, boost::beast::string_view, boost::system::error_code& error) {
            if (!reserve(size)) {
              over_budget_ = true;
              error = http::error::body_limit;
            }
          };
};

// Whether accepting failed for want of a resource that frees itself as connections close: trying
// again at once would fail at once.
bool out_of_resources(const boost::system::error_code& error) {
  return error.category() == boost::system::system_category() &&
         (error.value() == EMFILE || error.value() == ENFILE || error.value() == ENOBUFS ||
          error.value() == ENOMEM);
}

void Listener::accept() {
  asio::io_context& loop = *loops[next_loop];
  acceptor->async_accept(loop, [this](boost::system::error_code error, Session::Socket socket) {
    if (error == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (out_of_resources(error)) {  // after 50 ms, doubling up to 1 s (docs/serving.md)
      if (accept_backoff == Clock::duration::zero()) {
        *log << "recemb serve: cannot accept connections (" << error.message()
             << "); trying again after 50 ms, doubling up to 1 s, until it can\n"
             << std::flush;
        accept_backoff = std::chrono::milliseconds(50);
      } else {
        accept_backoff = std::min<Clock::duration>(2 * accept_backoff, std::chrono::seconds(1));
      }
      accept_retry->expires_after(accept_backoff);
      accept_retry->async_wait([this](boost::system::error_code waited) {
        if (!waited && acceptor->is_open()) accept();
      });
      return;
    }
    if (!error) {
      if (accept_backoff != Clock::duration::zero()) {
        *log << "recemb serve: accepting connections again\n" << std::flush;
        accept_backoff = Clock::duration::zero();
      }
      // Answers leave at once: no Nagle delay after a short write.
      socket.set_option(tcp::no_delay(true), error);
      // Started on its own loop (the accepting thread may be another's).
      const std::shared_ptr<Session> session = std::make_shared<Session>(*this, std::move(socket));
      asio::post(session->executor(), [session] { session->start(); });
      next_loop = (next_loop + 1) % loops.size();
    }
    accept();
  });
}

// Runs `loop` until it has no work left. A handler that throws (an allocation failing in the HTTP
// layer, such as a body's) does not end it: the connection it served is dropped as the handler
// unwinds (its session's last references go), and the loop goes on with the others.
void run_loop(asio::io_context& loop) {
  for (;;) {
    try {
      loop.run();
      return;
    } catch (const std::exception&) {
    }
  }
}

void Listener::close_everything() {
  boost::system::error_code ignored;
  acceptor->close(ignored);
  accept_retry->cancel();
  idle_loops_kept.clear();  // each loop then ends with its last connection
  // Taken under the lock, let go after it: the last reference to a session that ended meanwhile
  // destroys it, which takes the lock.
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard lock(sessions_mutex);
    for (Session* session : sessions) {
      // Null when the session is being destroyed (it then waits for the lock to leave the set).
      if (std::shared_ptr<Session> alive = session->weak_from_this().lock()) {
        open.push_back(std::move(alive));
      }
    }
  }
  for (const std::shared_ptr<Session>& session : open) {
    asio::post(session->executor(), [session] { session->stop(); });
  }
}

}  // namespace

struct HttpServer::Impl : Listener {};

HttpServer::HttpServer(const HttpServerOptions& options,
                       std::function<HttpResponse(const HttpRequest&)> handler,
                       std::function<HttpResponse(const HttpRefusal&)> refusal)
    : impl_(std::make_unique<Impl>()) {
  // Each request allocates and frees buffers of its answer's size (a binary answer of 64 examples
  // x 26 features of dim 16: 106 KB) on its thread. glibc would give the freed memory back to the
  // system at once (madvise, brk) and fault it in again for the next request, each time flushing
  // the TLBs of every core: keep up to 64 MiB freed instead. Process-wide; a server process
  // allocates for its requests.
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  mallopt(M_MMAP_THRESHOLD, 16 << 20);
  Impl& impl = *impl_;
  impl.handler = std::move(handler);
  impl.refusal = std::move(refusal);
  impl.max_body_bytes = static_cast<uint64_t>(std::max<int64_t>(options.max_body_bytes, 0));
  impl.max_buffered_bytes = static_cast<uint64_t>(std::max<int64_t>(options.max_buffered_bytes, 0));
  impl.read_timeout_seconds = options.read_timeout_seconds;
  impl.read_timeout = std::chrono::seconds(options.read_timeout_seconds);
  const int cores = static_cast<int>(std::max(std::thread::hardware_concurrency(), 1U));
  const int loops = options.threads > 0 ? std::min(options.threads, cores) : cores;
  for (int i = 0; i < loops; ++i) {
    impl.loops.push_back(std::make_unique<asio::io_context>(1));  // run by one thread
    if (i > 0) impl.idle_loops_kept.push_back(asio::make_work_guard(*impl.loops.back()));
  }
  tcp::acceptor& acceptor = impl.acceptor.emplace(*impl.loops.front());
  impl.accept_retry.emplace(*impl.loops.front());
  impl.log = options.log != nullptr ? options.log : &std::cerr;
  const std::string address = options.host + ":" + std::to_string(options.port);
  boost::system::error_code error;
  const tcp::resolver::results_type endpoints =
      tcp::resolver(*impl.loops.front())
          .resolve(options.host, std::to_string(options.port),
                   tcp::resolver::passive | tcp::resolver::numeric_service, error);
  for (const tcp::endpoint endpoint : endpoints) {
    error = {};
    acceptor.open(endpoint.protocol(), error);
    // SO_REUSEADDR (a restart may bind while old connections linger), not SO_REUSEPORT, with which
    // a second server on the same port would share its connections.
    if (!error) acceptor.set_option(tcp::acceptor::reuse_address(true), error);
    if (!error) acceptor.bind(endpoint, error);
    // The longest backlog: clients connecting at once beyond a short one would wait for their
    // SYN's retransmission (1 s).
    if (!error) acceptor.listen(asio::socket_base::max_listen_connections, error);
    if (!error) break;
    boost::system::error_code ignored;
    acceptor.close(ignored);
  }
  if (error || !acceptor.is_open()) {
    throw InvalidArgument("cannot listen on " + address + " (" + error.message() +
                          "; is the port in use, or the host not an address of this machine?)");
  }
  impl.port = acceptor.local_endpoint().port();
  impl.accept();
}

HttpServer::~HttpServer() = default;

int HttpServer::port() const { return impl_->port; }

int HttpServer::threads() const { return static_cast<int>(impl_->loops.size()); }

void HttpServer::run() {
  if (impl_->stopped) return;
  std::vector<std::thread> helpers;
  for (size_t i = 1; i < impl_->loops.size(); ++i) {
    helpers.emplace_back([loop = impl_->loops[i].get()] { run_loop(*loop); });
  }
  run_loop(*impl_->loops.front());  // until the acceptor is closed and its connections too
  for (std::thread& helper : helpers) helper.join();
}

void HttpServer::stop() {
  impl_->stopped = true;
  asio::post(*impl_->loops.front(), [impl = impl_.get()] { impl->close_everything(); });
}

}  // namespace recemb::serve

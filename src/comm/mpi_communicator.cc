// The communicator over MPI, and the one file of recemb that includes <mpi.h> (only this file is
// compiled with MPI's include directories, and only when recemb is built with MPI).
//
// Exchanges. Each is two rounds of point-to-point messages between every pair of ranks, posted at
// once (nonblocking) and then waited for: all_to_all sends every other rank its part's int64 byte
// count, then the part; all_gather sends every other rank its length, then its bytes. A message is
// at most 1 GiB (MPI counts are int): larger parts go in pieces, received in the order sent. Not
// MPI's collectives: waiting must be able to notice a rank that left (below), so it cannot block
// in MPI, and OpenMPI's nonblocking collectives (libnbc) took 50 us where these rounds take a few.
//
// Waiting. A round is completed by polling its requests (MPI_Testall): without pause for the
// first 100 ms (a training step's exchanges end well within it), then with pauses growing to 1 ms,
// so that a rank waiting for a busy peer does not hold a core. While it waits, it also looks for
// the exit announcements of the other ranks.
//
// Leaving (docs/scaling.md, "When a rank fails"). Every rank counts the rounds it starts (every
// rank starts the same ones, in the same order). A rank leaves the job in MPI_Finalize (a
// delete callback of an attribute on MPI_COMM_SELF, the standard's hook for this, whoever calls
// MPI_Finalize) or, when recemb initialized MPI, in an exit handler that then calls MPI_Finalize:
// it sends every other rank {rounds started, exit status} on a second duplicate of
// MPI_COMM_WORLD (the control communicator), then waits in an MPI_Ibarrier of that communicator
// until every rank has left, and frees both duplicates. A rank waiting in round n that learns
// that rank q left after starting n rounds or fewer knows that q will never take part: the
// call throws FailedPrecondition naming q. Ranks that finish at different times wait for each
// other as long as it takes; but a rank that exits with a non-zero status waits at most 3 s for the
// others to exit too (ranks that agreed on an error exit together, each with its message), then
// ends the job with MPI_Abort. So does a rank one of whose calls failed or was abandoned, at once
// when it exits: the peers may wait in that round forever, and MPI_Finalize (a barrier in
// OpenMPI) would wait with them. A peer that dies is mpirun's business: it ends the whole job, and
// nothing here blocks signals or catches them. The exit handler is registered with glibc's
// on_exit, which passes it the exit status.
#include "comm/mpi_communicator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/error.h"

#include "util/check.h"

#if defined(RECEMB_HAVE_MPI) && RECEMB_HAVE_MPI
#include <mpi.h>
#endif

namespace recemb {
namespace {

// See set_mpi_message_limit.
std::atomic<int64_t> g_message_limit{INT_MAX};

}  // namespace

void internal::set_mpi_message_limit(int64_t bytes) {
  RECEMB_CHECK(bytes >= 1 && bytes <= INT_MAX);
  g_message_limit.store(bytes, std::memory_order_relaxed);
}

int launched_processes() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
}

#if defined(RECEMB_HAVE_MPI) && RECEMB_HAVE_MPI

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxPieceBytes = int64_t{1} << 30;
// A wait polls without pause for kSpinTime (a training step's exchanges end well within it), then
// pauses between polls, the pause doubling from kFirstPause to kMaxPause, and looks for exit
// announcements every kPollsPerAnnouncementCheck polls while it spins, after every pause then.
constexpr auto kSpinTime = std::chrono::milliseconds(100);
constexpr auto kFirstPause = std::chrono::microseconds(50);
constexpr auto kMaxPause = std::chrono::milliseconds(1);
constexpr int64_t kPollsPerAnnouncementCheck = 256;
// How long a rank exiting with a non-zero status waits for the others to exit as well.
constexpr auto kFailingExitGrace = std::chrono::seconds(3);
// The tag of an exit announcement on the control communicator (the only messages it carries).
constexpr int kExitTag = 1;

// What the communicator, the exit handler and the MPI_Finalize hook share (the program may still
// hold the communicator, or may have destroyed it, when the last two run). Guarded by g_mutex:
// recemb makes its MPI calls one thread at a time (MPI_THREAD_SERIALIZED), the exit handler too.
std::mutex g_mutex;
// Our duplicates of MPI_COMM_WORLD: the exchanges', and the control communicator of the exit
// announcements. MPI_COMM_NULL once this rank has left (or before the first mpi_communicator()).
MPI_Comm g_comm = MPI_COMM_NULL;
MPI_Comm g_control = MPI_COMM_NULL;
int g_rank = 0;
int g_size = 1;
// Rounds of messages on g_comm this rank has started: every rank starts the same ones, in the same
// order, so round n of one rank matches round n of every other.
int64_t g_started = 0;
// An exit announcement: {rounds started, exit status}. Per rank: the one received from it (the
// first entry -1 until then), and this rank's own, sent to every other rank when it leaves.
std::vector<std::array<int64_t, 2>> g_announcements;
int g_announcements_received = 0;
std::array<int64_t, 2> g_own_announcement = {};
bool g_left = false;
// Whether an MPI call of ours failed or was abandoned (the peers may wait in it forever), and
// what the call threw.
std::atomic<bool> g_failed{false};
std::string g_failure;

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return "MPI error code " + std::to_string(code);
  }
  return std::string(text, static_cast<size_t>(length));
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "an unknown thread level";
  }
}

// Ends the whole job, after printing `message` (one line, one write, so that the ranks' lines do
// not interleave).
[[noreturn]] void abort_job(const std::string& message, int status) {
  const std::string line = "recemb: rank " + std::to_string(g_rank) + ": " + message + "\n";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, status != 0 ? status : 1);
  std::abort();  // MPI_Abort does not return
}

// Polls done() until it returns true: without pause for kSpinTime, then with growing pauses, during
// which `lock` is released. Calls between() after every kPollsPerAnnouncementCheck-th poll, and
// after every poll that follows a pause.
template <typename Done, typename Between>
void poll(std::unique_lock<std::mutex>& lock, Done done, Between between) {
  const Clock::time_point start = Clock::now();
  auto pause = std::chrono::duration_cast<Clock::duration>(kFirstPause);
  bool paused = false;
  for (int64_t polls = 1;; ++polls) {
    if (done()) return;
    if (paused || polls % kPollsPerAnnouncementCheck == 0) between();
    if (Clock::now() - start < kSpinTime) continue;
    lock.unlock();
    std::this_thread::sleep_for(pause);
    lock.lock();
    pause = std::min<Clock::duration>(2 * pause, kMaxPause);
    paused = true;
  }
}

// Receives the exit announcements that have arrived. Returns false if an MPI call failed.
bool receive_announcements() {
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kExitTag, g_control, &arrived, &status) != MPI_SUCCESS) {
      return false;
    }
    if (!arrived) return true;
    std::array<int64_t, 2>& announcement = g_announcements[static_cast<size_t>(status.MPI_SOURCE)];
    if (MPI_Recv(announcement.data(), 2, MPI_INT64_T, status.MPI_SOURCE, kExitTag, g_control,
                 MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return false;
    }
    ++g_announcements_received;
  }
}

// This rank leaves the group (see the top of the file), exiting with `status`: announces it to
// every other rank, then waits in a barrier of the control communicator until every rank has left
// (at most kFailingExitGrace if status is not 0: then it ends the job), and frees both duplicates.
// Called with g_mutex held; once (later calls return at once).
void leave(std::unique_lock<std::mutex>& lock, int status) {
  if (g_left || g_comm == MPI_COMM_NULL) return;
  g_left = true;
  if (g_size > 1) {
    const auto fail = [](const char* call) {
      abort_job(std::string(call) + " failed while leaving the MPI job", 1);
    };
    g_own_announcement = {g_started, status};
    std::vector<MPI_Request> requests;
    for (int q = 0; q < g_size; ++q) {
      if (q == g_rank) continue;
      MPI_Request request;
      if (MPI_Isend(g_own_announcement.data(), 2, MPI_INT64_T, q, kExitTag, g_control, &request) !=
          MPI_SUCCESS) {
        fail("MPI_Isend");
      }
      requests.push_back(request);
    }
    MPI_Request barrier;
    if (MPI_Ibarrier(g_control, &barrier) != MPI_SUCCESS) fail("MPI_Ibarrier");
    const Clock::time_point start = Clock::now();
    poll(
        lock,
        [&] {
          int done = 0;
          if (MPI_Test(&barrier, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) fail("MPI_Test");
          return done != 0;
        },
        [&] {
          if (!receive_announcements()) fail("MPI_Recv");
          if (status == 0 || Clock::now() - start < kFailingExitGrace) return;
          std::string running;
          for (int q = 0; q < g_size; ++q) {
            if (q != g_rank && g_announcements[static_cast<size_t>(q)][0] < 0) {
              running += (running.empty() ? "" : ", ") + std::to_string(q);
            }
          }
          if (running.empty()) return;  // all have left: the barrier is about to complete
          abort_job("exits with status " + std::to_string(status) + " while rank(s) " + running +
                        " still run: ending the MPI job (MPI_Abort), so that none of them waits "
                        "for this rank in an exchange",
                    status);
        });
    // Every rank sent its announcements before it entered the barrier: receive the rest.
    while (g_announcements_received < g_size - 1) {
      MPI_Status source;
      if (MPI_Probe(MPI_ANY_SOURCE, kExitTag, g_control, &source) != MPI_SUCCESS ||
          !receive_announcements()) {
        fail("MPI_Recv");
      }
    }
    if (MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE) !=
        MPI_SUCCESS) {
      fail("MPI_Waitall");
    }
  }
  MPI_Comm_free(&g_control);
  MPI_Comm_free(&g_comm);
}

// The end of this rank's part in the job, exiting with `status`: MPI_Abort if a call of ours
// failed (the peers may wait in it forever), else leave().
void end_participation(int status) {
  std::unique_lock<std::mutex> lock(g_mutex);
  if (g_failed.load()) {
    abort_job("ending the MPI job (MPI_Abort), as an exchange failed: " + g_failure, status);
  }
  leave(lock, status);
}

// Runs inside MPI_Finalize, first, while MPI still works: when the program finalizes MPI itself
// (its exit status unknown here, taken as 0), or after finalize_at_exit has left.
int leave_at_finalize(MPI_Comm, int, void*, void*) {
  end_participation(0);
  return MPI_SUCCESS;
}

// Registered with on_exit (glibc), which passes the exit status, when recemb initialized MPI.
void finalize_at_exit(int status, void*) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  end_participation(status);
  MPI_Finalize();
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(int rank, int size) : rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "mpi"; }

  void all_to_all(std::span<const std::byte> send, std::span<const int64_t> send_counts,
                  std::vector<std::byte>& recv, std::span<int64_t> recv_counts) override {
    const auto n = static_cast<size_t>(size_);
    RECEMB_CHECK(send_counts.size() == n && recv_counts.size() == n);
    int64_t send_total = 0;
    for (const int64_t count : send_counts) {
      RECEMB_CHECK(count >= 0);
      send_total += count;
    }
    RECEMB_CHECK(send_total == static_cast<int64_t>(send.size()));
    std::unique_lock<std::mutex> lock(g_mutex);
    check_can_exchange();
    const auto me = static_cast<size_t>(rank_);
    recv_counts[me] = send_counts[me];
    exchange(
        lock, "all_to_all, the byte counts", kCountsTag,
        [&](size_t q) { return std::as_bytes(send_counts.subspan(q, 1)); },
        [&](size_t q) { return std::as_writable_bytes(recv_counts.subspan(q, 1)); });
    int64_t recv_total = 0;
    for (const int64_t count : recv_counts) recv_total += count;
    recv.resize(static_cast<size_t>(recv_total));
    set_offsets(send_counts, send_offsets_);
    set_offsets(recv_counts, recv_offsets_);
    if (send_counts[me] != 0) {
      std::memcpy(recv.data() + recv_offsets_[me], send.data() + send_offsets_[me],
                  static_cast<size_t>(send_counts[me]));
    }
    exchange(
        lock, "all_to_all, the bytes", kDataTag,
        [&](size_t q) {
          return send.subspan(static_cast<size_t>(send_offsets_[q]),
                              static_cast<size_t>(send_counts[q]));
        },
        [&](size_t q) {
          return std::span(recv).subspan(static_cast<size_t>(recv_offsets_[q]),
                                         static_cast<size_t>(recv_counts[q]));
        });
  }

  void all_gather(std::span<const std::byte> send, std::vector<std::byte>& recv,
                  std::span<int64_t> recv_counts) override {
    RECEMB_CHECK(recv_counts.size() == static_cast<size_t>(size_));
    std::unique_lock<std::mutex> lock(g_mutex);
    check_can_exchange();
    const auto me = static_cast<size_t>(rank_);
    recv_counts[me] = static_cast<int64_t>(send.size());
    exchange(
        lock, "all_gather, the lengths", kCountsTag,
        [&](size_t) { return std::as_bytes(std::span<const int64_t>(recv_counts).subspan(me, 1)); },
        [&](size_t q) { return std::as_writable_bytes(recv_counts.subspan(q, 1)); });
    int64_t total = 0;
    for (const int64_t count : recv_counts) total += count;
    recv.resize(static_cast<size_t>(total));
    set_offsets(recv_counts, recv_offsets_);
    if (!send.empty()) std::memcpy(recv.data() + recv_offsets_[me], send.data(), send.size());
    exchange(
        lock, "all_gather, the bytes", kDataTag, [&](size_t) { return send; },
        [&](size_t q) {
          return std::span(recv).subspan(static_cast<size_t>(recv_offsets_[q]),
                                         static_cast<size_t>(recv_counts[q]));
        });
  }

 private:
  // The tags of an exchange's two rounds: MPI delivers the messages between two ranks with one tag
  // in the order sent, so a fast rank's next counts never match this call's data.
  static constexpr int kCountsTag = 1;
  static constexpr int kDataTag = 2;

  // Throws unless this rank can still exchange. After a failed or abandoned exchange, whose
  // requests may still write into the caller's buffers if MPI made progress, no more MPI calls.
  static void check_can_exchange() {
    if (g_failed.load()) {
      throw FailedPrecondition(
          "mpi_communicator: no more exchanges on this rank, which ends the MPI job when it "
          "exits: an earlier one failed: " +
          g_failure);
    }
    if (g_comm == MPI_COMM_NULL) {
      throw FailedPrecondition("mpi_communicator: MPI was finalized; no more exchanges");
    }
  }

  void check(int code, const char* call) const {
    if (code == MPI_SUCCESS) return;
    fail(std::string(call) + " failed on rank " + std::to_string(rank_) + " of " +
         std::to_string(size_) + ": " + mpi_error_string(code));
  }

  [[noreturn]] static void fail(const std::string& message) {
    g_failure = message;
    g_failed.store(true);
    throw FailedPrecondition(message);
  }

  // One round of point-to-point messages, exchange number g_started++ (`what`, for messages): to
  // every other rank q the bytes to(q), from it the bytes from(q) (both sides know every size), as
  // messages of at most min(message limit, 1 GiB) bytes tagged `tag`; returns when all arrived.
  // The ranks are visited from this one's neighbour on, so that they do not all start with rank 0.
  template <typename To, typename From>
  void exchange(std::unique_lock<std::mutex>& lock, const char* what, int tag, To to, From from) {
    const int64_t number = g_started++;
    const int64_t piece = std::min(g_message_limit.load(std::memory_order_relaxed), kMaxPieceBytes);
    const auto post = [&](auto part, int q, auto start, const char* call) {
      for (size_t done = 0; done < part.size(); done += static_cast<size_t>(piece)) {
        const auto bytes =
            static_cast<int>(std::min<size_t>(static_cast<size_t>(piece), part.size() - done));
        MPI_Request request;
        check(start(part.data() + done, bytes, MPI_BYTE, q, tag, g_comm, &request), call);
        requests_.push_back(request);
      }
    };
    requests_.clear();
    for (int step = 1; step < size_; ++step) {
      const int q = (rank_ + size_ - step) % size_;
      post(from(static_cast<size_t>(q)), q, MPI_Irecv, "MPI_Irecv");
    }
    for (int step = 1; step < size_; ++step) {
      const int q = (rank_ + step) % size_;
      post(to(static_cast<size_t>(q)), q, MPI_Isend, "MPI_Isend");
    }
    wait(lock, what, number);
  }

  // Waits for requests_, those of exchange `number` (`what`, for messages), to complete; throws
  // FailedPrecondition if a rank that will never join it has left (see the top of the file).
  void wait(std::unique_lock<std::mutex>& lock, const char* what, int64_t number) {
    poll(
        lock,
        [&] {
          if (g_comm == MPI_COMM_NULL) {  // left while this thread paused
            throw FailedPrecondition(std::string("mpi_communicator: ") + what +
                                     ": this rank left the MPI job during the exchange");
          }
          int done = 0;
          check(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done,
                            MPI_STATUSES_IGNORE),
                "MPI_Testall");
          return done != 0;
        },
        [&] {
          if (!receive_announcements()) {
            fail(std::string(what) + " on rank " + std::to_string(rank_) +
                 ": receiving the exit announcements of the other ranks failed");
          }
          for (int q = 0; q < size_; ++q) {
            const std::array<int64_t, 2>& left = g_announcements[static_cast<size_t>(q)];
            if (left[0] < 0 || left[0] > number) continue;  // running, or it started this one
            requests_.clear();                              // abandoned: never complete
            fail("rank " + std::to_string(q) + " left the MPI job (exit status " +
                 std::to_string(left[1]) + ") without taking part in the exchange (" + what +
                 ") that rank " + std::to_string(rank_) +
                 " waits in: every rank must make the same collective calls, in the same order "
                 "(docs/scaling.md, \"When a rank fails\")");
          }
        });
    requests_.clear();
  }

  // The byte offset of each part: the sum of the counts before it.
  static void set_offsets(std::span<const int64_t> counts, std::vector<int64_t>& offsets) {
    offsets.resize(counts.size());
    int64_t offset = 0;
    for (size_t q = 0; q < counts.size(); ++q) {
      offsets[q] = offset;
      offset += counts[q];
    }
  }

  int rank_;
  int size_;
  // Scratch reused by every call (calls are serialized: one thread at a time).
  std::vector<int64_t> send_offsets_, recv_offsets_;
  std::vector<MPI_Request> requests_;
};

std::shared_ptr<Communicator> make_world_communicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    throw FailedPrecondition("mpi_communicator: the program has already finalized MPI");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      throw FailedPrecondition(
          std::string("mpi_communicator: the program initialized MPI with ") +
          thread_level_name(provided) +
          ", but recemb calls MPI from whichever thread runs it and needs at least "
          "MPI_THREAD_SERIALIZED: initialize MPI with MPI_Init_thread(&argc, &argv, "
          "MPI_THREAD_SERIALIZED, &provided), or leave it to recemb");
    }
  } else {
    // MPI's default error handler aborts the job if this fails.
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    RECEMB_CHECK(on_exit(finalize_at_exit, nullptr) == 0);
    if (provided < MPI_THREAD_SERIALIZED) {
      throw FailedPrecondition(std::string("mpi_communicator: this MPI library provides only ") +
                               thread_level_name(provided) +
                               ", and recemb needs MPI_THREAD_SERIALIZED");
    }
  }
  // Errors on MPI_COMM_WORLD (here, in MPI_Comm_dup) abort the job.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm control = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_dup(MPI_COMM_WORLD, &control);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(control, MPI_ERRORS_RETURN);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int keyval = MPI_KEYVAL_INVALID;
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, leave_at_finalize, &keyval, nullptr);
  MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr);
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_comm = comm;
  g_control = control;
  g_rank = rank;
  g_size = size;
  g_announcements.assign(static_cast<size_t>(size), {-1, 0});
  return std::make_shared<MpiCommunicator>(rank, size);
}

}  // namespace

bool mpi_available() { return true; }

std::shared_ptr<Communicator> mpi_communicator() {
  static const std::shared_ptr<Communicator> communicator = make_world_communicator();
  return communicator;
}

#else  // built without MPI

bool mpi_available() { return false; }

std::shared_ptr<Communicator> mpi_communicator() {
  throw FailedPrecondition(
      "recemb was built without MPI; install libopenmpi-dev and rebuild (docs/scaling.md)");
}

#endif

}  // namespace recemb

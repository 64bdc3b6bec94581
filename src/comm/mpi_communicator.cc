// The communicator over MPI, and the one file of recemb that includes <mpi.h> (only this file is
// compiled with MPI's include directories, and only when recemb is built with MPI).
//
// Exchanges. When every byte count and offset of an exchange fits MPI's int, it is one collective
// after the sizes: all_to_all is an MPI_Alltoall of the int64 counts, then an MPI_Alltoallv of the
// bytes; all_gather an MPI_Allgather of the int64 lengths, then an MPI_Allgatherv. Larger exchanges
// go in pieces of at most 1 GiB instead: all_to_all as point-to-point messages between each pair,
// all_gather as broadcasts from each rank in turn. Every rank must take the same path (a collective
// on one rank never matches point-to-point messages on another). all_gather's lengths are known to
// every rank; all_to_all's are not (a rank knows only what it sends and receives), so all_to_all
// agrees with an MPI_Allreduce of one int: a few microseconds per call, against silent truncation.
//
// Lifetime. The duplicate of MPI_COMM_WORLD lives until MPI_Finalize, which frees it before
// anything else (a delete callback of an attribute on MPI_COMM_SELF, the standard's hook for this),
// whoever calls MPI_Finalize. When recemb initialized MPI, an exit handler finalizes it, or, when
// one of our calls failed, calls MPI_Abort instead: the peers may still wait in that collective,
// and MPI_Finalize (a barrier in OpenMPI) would wait with them forever, where MPI_Abort ends the
// job. A peer that dies is mpirun's business: it ends the whole job, and nothing here blocks
// signals or catches them.
#include "comm/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
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

#if defined(RECEMB_HAVE_MPI) && RECEMB_HAVE_MPI

namespace {

constexpr int64_t kMaxPieceBytes = int64_t{1} << 30;

// What the exit handler and the MPI_Finalize hook share with the communicator (which the program
// may still hold, or may have destroyed, when they run): our duplicate of MPI_COMM_WORLD, and
// whether an MPI call of ours failed.
MPI_Comm g_comm = MPI_COMM_NULL;
std::atomic<bool> g_failed{false};

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

// Runs inside MPI_Finalize, first, while MPI still works.
int free_comm_at_finalize(MPI_Comm, int, void*, void*) {
  if (g_comm != MPI_COMM_NULL) MPI_Comm_free(&g_comm);
  return MPI_SUCCESS;
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_failed.load()) MPI_Abort(MPI_COMM_WORLD, 1);
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
    const MPI_Comm comm = communicator();

    check(
        MPI_Alltoall(send_counts.data(), 1, MPI_INT64_T, recv_counts.data(), 1, MPI_INT64_T, comm),
        "MPI_Alltoall");
    int64_t recv_total = 0;
    for (const int64_t count : recv_counts) recv_total += count;
    // When a buffer's total fits, so do its counts and offsets (sums of the counts before a part).
    const int64_t limit = g_message_limit.load(std::memory_order_relaxed);
    int in_pieces = send_total > limit || recv_total > limit ? 1 : 0;
    if (size_ > 1) {
      check(MPI_Allreduce(MPI_IN_PLACE, &in_pieces, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
    }
    recv.resize(static_cast<size_t>(recv_total));
    if (in_pieces != 0) {
      all_to_all_in_pieces(send, send_counts, recv, recv_counts, std::min(limit, kMaxPieceBytes),
                           comm);
      return;
    }
    set_counts(send_counts, send_counts_, send_offsets_);
    set_counts(recv_counts, recv_counts_, recv_offsets_);
    check(MPI_Alltoallv(send.data(), send_counts_.data(), send_offsets_.data(), MPI_BYTE,
                        recv.data(), recv_counts_.data(), recv_offsets_.data(), MPI_BYTE, comm),
          "MPI_Alltoallv");
  }

  void all_gather(std::span<const std::byte> send, std::vector<std::byte>& recv,
                  std::span<int64_t> recv_counts) override {
    RECEMB_CHECK(recv_counts.size() == static_cast<size_t>(size_));
    const MPI_Comm comm = communicator();
    const auto length = static_cast<int64_t>(send.size());
    check(MPI_Allgather(&length, 1, MPI_INT64_T, recv_counts.data(), 1, MPI_INT64_T, comm),
          "MPI_Allgather");
    int64_t total = 0;
    for (const int64_t count : recv_counts) total += count;
    recv.resize(static_cast<size_t>(total));
    const int64_t limit = g_message_limit.load(std::memory_order_relaxed);
    if (total > limit) {  // the same on every rank: every rank has every length
      all_gather_in_pieces(send, recv, recv_counts, std::min(limit, kMaxPieceBytes), comm);
      return;
    }
    set_counts(recv_counts, recv_counts_, recv_offsets_);
    check(MPI_Allgatherv(send.data(), static_cast<int>(length), MPI_BYTE, recv.data(),
                         recv_counts_.data(), recv_offsets_.data(), MPI_BYTE, comm),
          "MPI_Allgatherv");
  }

 private:
  MPI_Comm communicator() const {
    if (g_comm == MPI_COMM_NULL) {
      throw FailedPrecondition("mpi_communicator: MPI was finalized; no more exchanges");
    }
    return g_comm;
  }

  void check(int code, const char* call) const {
    if (code == MPI_SUCCESS) return;
    g_failed.store(true);
    throw FailedPrecondition(std::string(call) + " failed on rank " + std::to_string(rank_) +
                             " of " + std::to_string(size_) + ": " + mpi_error_string(code));
  }

  // counts as MPI's ints, with their offsets; the caller has checked that all fit.
  static void set_counts(std::span<const int64_t> counts, std::vector<int>& ints,
                         std::vector<int>& offsets) {
    ints.resize(counts.size());
    offsets.resize(counts.size());
    int64_t offset = 0;
    for (size_t q = 0; q < counts.size(); ++q) {
      ints[q] = static_cast<int>(counts[q]);
      offsets[q] = static_cast<int>(offset);
      offset += counts[q];
    }
  }

  // Every pair's part as messages of at most `piece` bytes, received in the order sent (MPI does
  // not reorder messages between two ranks with the same tag on one communicator).
  void all_to_all_in_pieces(std::span<const std::byte> send, std::span<const int64_t> send_counts,
                            std::vector<std::byte>& recv, std::span<const int64_t> recv_counts,
                            int64_t piece, MPI_Comm comm) {
    constexpr int kTag = 0;
    const auto me = static_cast<size_t>(rank_);
    requests_.clear();
    std::byte* recv_part = recv.data();
    for (size_t q = 0; q < recv_counts.size(); ++q) {
      if (q != me) {
        for (int64_t done = 0; done < recv_counts[q]; done += piece) {
          const auto bytes = static_cast<int>(std::min(piece, recv_counts[q] - done));
          MPI_Request request;
          check(MPI_Irecv(recv_part + done, bytes, MPI_BYTE, static_cast<int>(q), kTag, comm,
                          &request),
                "MPI_Irecv");
          requests_.push_back(request);
        }
      }
      recv_part += recv_counts[q];
    }
    const std::byte* send_part = send.data();
    for (size_t q = 0; q < send_counts.size(); ++q) {
      if (q != me) {
        for (int64_t done = 0; done < send_counts[q]; done += piece) {
          const auto bytes = static_cast<int>(std::min(piece, send_counts[q] - done));
          MPI_Request request;
          check(MPI_Isend(send_part + done, bytes, MPI_BYTE, static_cast<int>(q), kTag, comm,
                          &request),
                "MPI_Isend");
          requests_.push_back(request);
        }
      } else if (send_counts[q] != 0) {
        int64_t offset = 0;
        for (size_t r = 0; r < me; ++r) offset += recv_counts[r];
        std::memcpy(recv.data() + offset, send_part, static_cast<size_t>(send_counts[q]));
      }
      send_part += send_counts[q];
    }
    check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall");
  }

  // Each rank's part broadcast from that rank, in pieces of at most `piece` bytes.
  void all_gather_in_pieces(std::span<const std::byte> send, std::vector<std::byte>& recv,
                            std::span<const int64_t> recv_counts, int64_t piece, MPI_Comm comm) {
    int64_t offset = 0;
    for (size_t q = 0; q < recv_counts.size(); ++q) {
      if (q == static_cast<size_t>(rank_) && !send.empty()) {
        std::memcpy(recv.data() + offset, send.data(), send.size());
      }
      for (int64_t done = 0; done < recv_counts[q]; done += piece) {
        const auto bytes = static_cast<int>(std::min(piece, recv_counts[q] - done));
        check(MPI_Bcast(recv.data() + offset + done, bytes, MPI_BYTE, static_cast<int>(q), comm),
              "MPI_Bcast");
      }
      offset += recv_counts[q];
    }
  }

  int rank_;
  int size_;
  // Scratch reused by every call (calls are serialized: one thread at a time).
  std::vector<int> send_counts_, send_offsets_, recv_counts_, recv_offsets_;
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
    RECEMB_CHECK(std::atexit(finalize_at_exit) == 0);
    if (provided < MPI_THREAD_SERIALIZED) {
      throw FailedPrecondition(std::string("mpi_communicator: this MPI library provides only ") +
                               thread_level_name(provided) +
                               ", and recemb needs MPI_THREAD_SERIALIZED");
    }
  }
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);  // errors on MPI_COMM_WORLD abort the job
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int keyval = MPI_KEYVAL_INVALID;
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_comm_at_finalize, &keyval, nullptr);
  MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr);
  g_comm = comm;
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

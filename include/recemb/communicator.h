// Communicator: how the processes (ranks) of a sharded Embedding exchange data. An Embedding whose
// tables are split across processes talks to the others only through this interface: MPI stays
// behind one implementation, and tests connect several Embeddings inside one process.
//
//   // under `mpirun -np 4`: every rank builds the same Embedding and passes its local batch
//   recemb::Embedding layer(tables, features,
//                           {.optimizer = recemb::Adagrad{}, .communicator =
//                           recemb::mpi_communicator()});
//
// Every method except rank(), size() and name() is collective: every rank of the group calls it,
// in the same order, from one thread at a time per rank. A rank that fails inside a collective (a
// transport error, a peer that died) makes the call throw or the whole job end; it never returns
// partial data.
#ifndef RECEMB_COMMUNICATOR_H_
#define RECEMB_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "recemb/export.h"

namespace recemb {

class RECEMB_EXPORT Communicator {
 public:
  virtual ~Communicator();

  // This process's rank in [0, size()), and the number of ranks.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // What it talks through, for messages: "local", "in-process", "mpi".
  virtual std::string_view name() const = 0;

  // All-to-all with a part per rank. `send` holds size() consecutive parts, part q being
  // send_counts[q] bytes for rank q (send_counts has size() entries). On return, `recv` holds the
  // parts this rank received, consecutively from rank 0 up, and recv_counts[q] (size() entries) is
  // the byte count of the part from rank q. recv is resized, reusing its capacity.
  virtual void all_to_all(std::span<const std::byte> send, std::span<const int64_t> send_counts,
                          std::vector<std::byte>& recv, std::span<int64_t> recv_counts) = 0;

  // All-gather: every rank's `send` (any length, possibly different per rank), concatenated in
  // rank order into `recv` on every rank; recv_counts[q] (size() entries) is rank q's length.
  virtual void all_gather(std::span<const std::byte> send, std::vector<std::byte>& recv,
                          std::span<int64_t> recv_counts) = 0;
};

// This process alone: rank 0 of 1 (the default of an Embedding).
RECEMB_EXPORT std::shared_ptr<Communicator> local_communicator();

// `size` communicators connected to each other inside this process, rank q at index q: each
// acts as one rank and is used by its own thread (tests; one process simulating a group). A
// collective waits until every rank has entered it. Throws InvalidArgument if size < 1.
RECEMB_EXPORT std::vector<std::shared_ptr<Communicator>> in_process_communicators(int size);

// Collective: how the ranks agree on whether a step of theirs failed, so that an error on one rank
// makes every rank throw instead of leaving the others waiting in the next collective. Every rank
// passes the error it met (null: none). When some rank passed one, every rank throws the error of
// the lowest such rank R, with the message "rank R: <its message>" ("rank R: failed" if empty)
// and its type (recemb/error.h): InvalidArgument, FailedPrecondition, DataLoss,
// ResourceExhausted, or a std::system_error with the same errno (generic_category); any other
// exception becomes a FailedPrecondition. Returns when no rank passed an error. With one rank,
// rethrows `error` itself (its type and message unchanged).
RECEMB_EXPORT void agree_on_error(Communicator& communicator, const std::exception_ptr& error);

// How many processes an MPI launcher started, from the environment it gives each of them
// (OMPI_COMM_WORLD_SIZE of OpenMPI's mpirun, PMI_SIZE of MPICH's, Intel MPI's and srun's); 0 when
// it does not say (no launcher). Reads the environment only: MPI is not initialized.
RECEMB_EXPORT int launched_processes();

// Whether this build of recemb can talk MPI (built with an MPI library).
RECEMB_EXPORT bool mpi_available();

// The ranks of MPI_COMM_WORLD, through a communicator of their own (a duplicate, so recemb's
// messages never mix with the program's). Initializes MPI when the program has not (and then
// finalizes it at exit); a program that initializes MPI itself must do so with at least
// MPI_THREAD_SERIALIZED. Without mpirun, a group of one. Every call returns the same object.
// Throws FailedPrecondition when recemb was built without MPI (mpi_available() is false).
// A rank that leaves the job (exits, or finalizes MPI) while another waits for it in a collective
// it never joins makes that collective throw FailedPrecondition naming it; after a failed
// collective, every later one throws too, and the rank ends the job (MPI_Abort) when it exits. A
// rank that exits with a non-zero status ends the job if the others do not exit within 3 s
// (docs/scaling.md, "When a rank fails").
RECEMB_EXPORT std::shared_ptr<Communicator> mpi_communicator();

}  // namespace recemb

#endif  // RECEMB_COMMUNICATOR_H_

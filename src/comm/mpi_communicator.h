// The MPI communicator's one internal setting, for its tests (the communicator itself is
// recemb::mpi_communicator() in include/recemb/communicator.h).
#ifndef RECEMB_COMM_MPI_COMMUNICATOR_H_
#define RECEMB_COMM_MPI_COMMUNICATOR_H_

#include <cstdint>

namespace recemb::internal {

// The largest byte count, and the largest byte offset, that one MPI call is given: INT_MAX, as
// MPI counts and displacements are int. An exchange that needs more (a part, or a rank's whole
// send or receive buffer, above it) goes in pieces of at most min(bytes, 1 GiB) instead of one
// collective. Tests lower it to run that path on small buffers. bytes in [1, INT_MAX]. Every rank
// must set the same value, between collectives; a no-op without MPI.
void set_mpi_message_limit(int64_t bytes);

}  // namespace recemb::internal

#endif  // RECEMB_COMM_MPI_COMMUNICATOR_H_

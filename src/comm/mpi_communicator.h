// The MPI communicator's one internal setting, for its tests (the communicator itself is
// recemb::mpi_communicator() in include/recemb/communicator.h).
#ifndef RECEMB_COMM_MPI_COMMUNICATOR_H_
#define RECEMB_COMM_MPI_COMMUNICATOR_H_

#include <cstdint>

namespace recemb::internal {

// The largest byte count that one MPI message carries: INT_MAX, as MPI counts are int. A part
// above min(bytes, 1 GiB) goes in pieces of that size. Tests lower it to run that path on small
// buffers. bytes in [1, INT_MAX]. Every rank must set the same value, between collectives; a
// no-op without MPI.
void set_mpi_message_limit(int64_t bytes);

}  // namespace recemb::internal

#endif  // RECEMB_COMM_MPI_COMMUNICATOR_H_

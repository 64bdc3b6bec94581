// recemb/communicator.h. A Communicator is opaque here: Python holds it by shared_ptr (as
// EmbeddingOptions.communicator does) and sees only rank(), size() and name(); its collectives are
// called by the Embedding. Nothing releases the interpreter lock: none of these functions waits for
// other ranks.
#include <memory>

#include "recemb/communicator.h"

#include "bind.h"

namespace recemb::python {

void bind_communicator(py::module_& module) {
  py::class_<Communicator, std::shared_ptr<Communicator>>(
      module, "Communicator",
      "How the ranks of a sharded Embedding exchange data (opaque; pass it as "
      "EmbeddingOptions.communicator). Its collectives are called by the Embedding, from one "
      "thread at a time per rank.")
      .def("rank", &Communicator::rank, "This process's rank in [0, size()).")
      .def("size", &Communicator::size, "The number of ranks.")
      .def("name", &Communicator::name, "What it talks through: 'local', 'in-process', 'mpi'.");

  module.def("local_communicator", &local_communicator,
             "This process alone: rank 0 of 1 (an Embedding's default).");
  module.def("in_process_communicators", &in_process_communicators, py::arg("size"),
             "`size` communicators connected inside this process, rank q at index q, each to be "
             "used by its own thread. Raises InvalidArgument if size < 1.");
  module.def("launched_processes", &launched_processes,
             "How many processes an MPI launcher started (OMPI_COMM_WORLD_SIZE or PMI_SIZE in "
             "the environment), 0 without one.");
  module.def("mpi_available", &mpi_available,
             "Whether this build of recemb can talk MPI (built with an MPI library).");
  module.def("mpi_communicator", &mpi_communicator,
             "The ranks of MPI_COMM_WORLD (a group of one without mpirun); initializes MPI if "
             "needed, and every call returns the same object. Raises FailedPrecondition when "
             "mpi_available() is False.");
}

}  // namespace recemb::python

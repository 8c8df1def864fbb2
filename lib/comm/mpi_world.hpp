#pragma once
// The `mpi` backend: one rank per MPI process (launched by mpirun or srun), host buffers.
// Available when meshgate is built with MPI (MESHGATE_HAVE_MPI is defined); this header does
// not include mpi.h, so users of the backend need no MPI flags of their own.
#include <memory>
#include <string>

#include "comm/communicator.hpp"

namespace meshgate::comm {

// MPI_Init_thread on construction and MPI_Finalize on destruction, when MPI was not already
// initialized by someone else (then it leaves both to them). One per process; construct it
// before any MPI communicator and destroy every MPI communicator before it. Collectives are
// called by one thread at a time, so it asks for MPI_THREAD_SERIALIZED.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  MpiSession() : MpiSession(nullptr, nullptr) {}
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owns_ = false;
};

// This process's communicator over every process of the job (a duplicate of MPI_COMM_WORLD).
// Error(runtime) when MPI is not initialized.
std::unique_ptr<Communicator> mpi_world();

// MPI_Get_library_version's first line, e.g. "Open MPI v4.1.4, ..." (for run provenance).
std::string mpi_library_version();

}  // namespace meshgate::comm

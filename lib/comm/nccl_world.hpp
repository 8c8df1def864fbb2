#pragma once
// The `nccl` backend: one rank per process and GPU, device buffers, one CUDA stream per
// communicator. Defined when meshgate is built with CUDA and NCCL is found (MESHGATE_HAVE_NCCL
// is defined then); this header includes neither CUDA nor NCCL.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace meshgate::comm {

// How many CUDA devices this process sees; 0 without a driver or a device.
int cuda_device_count();

// The CUDA runtime this build links, e.g. "13.0", and the driver's CUDA version ("" without a
// driver): for the provenance of every result.
std::string cuda_runtime_version();
std::string cuda_driver_version();
// The names of the visible CUDA devices, in device order (empty without a driver or device).
std::vector<std::string> cuda_device_names();

// NCCL's version as "major.minor.patch" (ncclGetVersion), e.g. "2.28.9".
std::string nccl_library_version();

// The launcher's node-local rank (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID,
// LOCAL_RANK), if any.
std::optional<int> local_rank_from_environment();
// The GPU of a rank: its local rank on its node (the only device when one is visible, the
// global rank modulo the devices without a launcher). Error when the node has more local ranks
// than GPUs.
int device_for_rank(std::optional<int> local_rank, int rank, int devices);

// Collective over `bootstrap`, a host-memory communicator (mpi_world() in a job, or a threads
// world of one rank in a single process): rank 0 creates the NCCL unique id, the bootstrap
// broadcasts it, and every rank joins an NCCL communicator of the same size and rank order on
// CUDA device `device` (by default device_for_rank of its local rank).
// Error(runtime) without a CUDA device or when NCCL fails, naming the call and NCCL's reason.
std::unique_ptr<Communicator> nccl_world(Communicator& bootstrap, int device = -1);

// Times work on an nccl communicator's stream with CUDA events, as nccl-tests does:
// start() and stop() record events on the stream, seconds() waits for stop's event and returns
// the time between the two.
class EventTimer {
 public:
  // Error(value) unless `comm` is an nccl communicator.
  explicit EventTimer(Communicator& comm);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start();
  void stop();
  double seconds();

 private:
  struct Events;
  std::unique_ptr<Events> events_;
};

}  // namespace meshgate::comm

// The process backends of meshgate-runner, built when MPI is found: `mpi` (one rank per
// process, host buffers) and `nccl` (one rank per process and GPU, bootstrapped over MPI).
// The driver starts the runner under mpirun or srun; every process runs the same loop.
#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "comm/mpi_world.hpp"
#include "core/error.hpp"
#include "provenance.hpp"
#include "runner.hpp"
#ifdef MESHGATE_HAVE_NCCL
#include "comm/nccl_world.hpp"
#endif

namespace meshgate::runner {

namespace {

// The process's rank among those of its host: where a GPU index comes from.
int local_rank(int world_rank) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      return std::atoi(value);
    }
  }
  return world_rank;
}

// Owns MPI for the run: the session, the world communicator, and (nccl) the NCCL world the
// cases run on; the ProcessBackend inside does the work. The destructor ends that first, then
// the members go in reverse order, so every communicator is gone before MPI_Finalize.
class MpiRun final : public OwningProcessBackend {
 public:
  MpiRun() : world_(comm::mpi_world()) {}
  ~MpiRun() override { inner_.reset(); }

  bool start(const RunOptions& options, std::ostream& err) {
    if (options.ranks && *options.ranks != world_->size()) {
      if (world_->rank() == 0) {
        err << "--ranks " << *options.ranks << " but the launcher started " << world_->size()
            << (world_->size() == 1 ? " process" : " processes") << ": run with mpirun -np "
            << *options.ranks << " (meshgate run --backend " << options.backend
            << " --ranks N does that)\n";
      }
      return false;
    }
    const std::string mpi_version = comm::mpi_library_version();
    if (options.backend == "mpi") {
      inner_ = std::make_unique<ProcessBackend>("mpi", *world_, *world_, abort_job(),
                                                versions_info(mpi_version));
      return true;
    }
#ifdef MESHGATE_HAVE_NCCL
    // The NCCL that would run is recorded even when no GPU lets it: a skip says where.
    const std::string nccl_version = comm::nccl_library_version();
    const int devices = comm::cuda_device_count();
    if (devices == 0) {
      inner_ = std::make_unique<ProcessBackend>(
          "nccl", *world_, *world_, abort_job(), versions_info(mpi_version, nccl_version),
          std::string(kNcclWithoutDevice));
      return true;
    }
    try {
      nccl_ = comm::nccl_world(*world_, local_rank(world_->rank()) % devices);
    } catch (const meshgate::Error& e) {
      if (world_->rank() == 0) err << "cannot start the nccl backend: " << e.what() << '\n';
      return false;
    }
    inner_ = std::make_unique<ProcessBackend>("nccl", *nccl_, *world_, abort_job(),
                                              versions_info(mpi_version, nccl_version));
    return true;
#else
    (void)local_rank;
    inner_ = std::make_unique<ProcessBackend>(
        "nccl", *world_, *world_, abort_job(), versions_info(mpi_version),
        "this runner was built without NCCL (configure with the cuda preset where CUDA and "
        "NCCL are installed)");
    return true;
#endif
  }

 private:
  static std::function<void(int)> abort_job() {
    // Every process of the job ends, including ranks blocked inside a collective.
    return [](int code) { MPI_Abort(MPI_COMM_WORLD, code); };
  }

  comm::MpiSession session_;
  std::unique_ptr<comm::Communicator> world_;
  std::unique_ptr<comm::Communicator> nccl_;
};

}  // namespace

std::unique_ptr<RunBackend> make_process_backend(const RunOptions& options, std::ostream& err) {
  auto run = std::make_unique<MpiRun>();
  if (!run->start(options, err)) return nullptr;
  return run;
}

}  // namespace meshgate::runner

// The nccl backend of a runner built without MPI: one rank, this process, its GPU. NCCL needs
// only its unique id handed to every rank; with one rank, a one-rank threads world does that,
// and the runner's own agreement and broadcasts go over the same world.
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "comm/nccl_world.hpp"
#include "comm/threads_world.hpp"
#include "core/error.hpp"
#include "provenance.hpp"
#include "runner.hpp"

namespace meshgate::runner {

namespace {

class SingleProcessNccl final : public OwningProcessBackend {
 public:
  SingleProcessNccl() : control_(world_.communicator(0)) {}
  ~SingleProcessNccl() override { inner_.reset(); }

  bool start(const RunOptions& options, std::ostream& err) {
    if (options.ranks && *options.ranks != 1) {
      err << "--ranks " << *options.ranks
          << ": this runner was built without MPI, so its nccl backend runs one rank in one "
             "process; build it with MPI (libopenmpi-dev) and start it under mpirun for more\n";
      return false;
    }
    // The NCCL that would run is recorded even when no GPU lets it: a skip says where.
    const std::string nccl_version = comm::nccl_library_version();
    if (comm::cuda_device_count() == 0) {
      inner_ = std::make_unique<ProcessBackend>("nccl", *control_, *control_, nullptr,
                                                versions_info(std::nullopt, nccl_version),
                                                std::string(kNcclWithoutDevice));
      return true;
    }
    try {
      nccl_ = comm::nccl_world(*control_);
    } catch (const meshgate::Error& e) {
      err << "cannot start the nccl backend: " << e.what() << '\n';
      return false;
    }
    inner_ = std::make_unique<ProcessBackend>(
        "nccl", *nccl_, *control_, nullptr, versions_info(std::nullopt, nccl_version));
    return true;
  }

 private:
  comm::ThreadsWorld world_{1};
  std::unique_ptr<comm::Communicator> control_;
  std::unique_ptr<comm::Communicator> nccl_;
};

}  // namespace

std::unique_ptr<RunBackend> make_single_process_nccl_backend(const RunOptions& options,
                                                             std::ostream& err) {
  auto run = std::make_unique<SingleProcessNccl>();
  if (!run->start(options, err)) return nullptr;
  return run;
}

}  // namespace meshgate::runner

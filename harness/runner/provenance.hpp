#pragma once
// Where a run happened: commit, machine and versions for the "run" object of results.json.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace meshgate::runner {

struct CommitInfo {
  std::string commit;  // "unknown" when git is unavailable
  bool dirty = false;
};

// MESHGATE_COMMIT / MESHGATE_DIRTY when set (the driver sets them for builds of other
// revisions), otherwise git in the source tree this runner was built from.
CommitInfo commit_info();

// {"host", "cpu", "cores", "gpus": [], "fingerprint"}; the fingerprint is a stable hash of
// the cpu model, core count, gpus and `versions`, so results of one machine class compare.
nlohmann::ordered_json machine_info(const nlohmann::ordered_json& versions);

// {"meshgate", "cuda", "nccl", "mpi"}: null for what this run does not use; a process
// backend passes the versions of the MPI library and NCCL it runs on.
nlohmann::ordered_json versions_info(std::optional<std::string> mpi = std::nullopt,
                                     std::optional<std::string> nccl = std::nullopt,
                                     std::optional<std::string> cuda = std::nullopt);

// "2026-11-21T06:27:11Z" for now.
std::string utc_timestamp_now();

// A fresh run id: "<UTC yyyymmddThhmmssZ>-<6 hex digits>".
std::string new_run_id();

// The run object of results.json; `versions` as versions_info() makes them, with the
// backend's own (mpi, nccl) filled in.
nlohmann::ordered_json run_info(const std::string& run_id, const std::string& started,
                                const std::string& backend, int world_size,
                                const nlohmann::ordered_json& versions);

// What this runner is: {"version", "commit", "dirty", "backends": [...], "cuda", "machine"};
// the backends are those compiled in (threads always, mpi and nccl when built with them), cuda
// the CUDA runtime it links (null without one) and machine what a threads run's results say.
nlohmann::ordered_json build_info();

// build_info() in one line for `meshgate-runner --version`.
std::string version_text();

// FNV-1a 64 as 16 hex digits: stable across builds and platforms.
std::string stable_hash(const std::string& text);

}  // namespace meshgate::runner

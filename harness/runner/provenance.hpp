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

// {"meshgate", "cuda", "nccl", "mpi"}: null for what this runner does not use.
nlohmann::ordered_json versions_info();

// "2026-11-21T06:27:11Z" for now.
std::string utc_timestamp_now();

// A fresh run id: "<UTC yyyymmddThhmmssZ>-<6 hex digits>".
std::string new_run_id();

// The run object of results.json.
nlohmann::ordered_json run_info(const std::string& run_id, const std::string& started,
                                const std::string& backend, int world_size);

// FNV-1a 64 as 16 hex digits: stable across builds and platforms.
std::string stable_hash(const std::string& text);

}  // namespace meshgate::runner

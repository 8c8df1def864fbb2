#include "provenance.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <thread>

#include "gemm/gemm.hpp"
#ifdef MESHGATE_HAVE_NCCL
#include "comm/nccl_world.hpp"
#endif

namespace meshgate::runner {

namespace {

// Runs a shell command and returns its stdout, or nullopt when it fails.
std::optional<std::string> command_output(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string out;
  std::array<char, 512> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) out += buffer.data();
  if (pclose(pipe) != 0) return std::nullopt;
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  std::size_t start = 0;
  while (start < s.size() && s[start] == ' ') ++start;
  return s.substr(start);
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) return trim(line.substr(colon + 1));
    }
  }
  return "unknown";
}

std::string host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "unknown";
  return name.data();
}

std::string format_utc(std::time_t t, const char* format) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::array<char, 64> buffer{};
  std::strftime(buffer.data(), buffer.size(), format, &tm);
  return buffer.data();
}

}  // namespace

std::string stable_hash(const std::string& text) {
  std::uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  std::array<char, 17> hex{};
  std::snprintf(hex.data(), hex.size(), "%016llx", static_cast<unsigned long long>(hash));
  return hex.data();
}

CommitInfo commit_info() {
  CommitInfo info;
  const char* commit = std::getenv("MESHGATE_COMMIT");
  const char* dirty = std::getenv("MESHGATE_DIRTY");
  const std::string git = std::string("git -C '") + MESHGATE_SOURCE_DIR + "' ";
  if (commit != nullptr && *commit != '\0') {
    info.commit = commit;
  } else if (auto out = command_output(git + "rev-parse HEAD 2>/dev/null")) {
    info.commit = trim(*out);
  } else {
    info.commit = "unknown";
  }
  if (dirty != nullptr && *dirty != '\0') {
    const std::string value = dirty;
    info.dirty = !(value == "0" || value == "false" || value == "no");
  } else if (commit == nullptr || *commit == '\0') {
    const auto out = command_output(git + "status --porcelain --untracked-files=no 2>/dev/null");
    info.dirty = out && !trim(*out).empty();
  }
  return info;
}

nlohmann::ordered_json versions_info(std::optional<std::string> mpi,
                                     std::optional<std::string> nccl,
                                     std::optional<std::string> cuda) {
  // The threads backend uses neither NCCL nor MPI (the process backends fill theirs in); a
  // CUDA build records its CUDA runtime whatever the backend, since the GEMM cases use it.
#ifdef MESHGATE_HAVE_NCCL
  if (!cuda) cuda = comm::cuda_runtime_version();
#endif
  const auto or_null = [](const std::optional<std::string>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  // The cuBLASLt the loader picked (LD_LIBRARY_PATH can pick another build of it): GEMM
  // results depend on its version, and a comparison of two builds names both.
  const std::optional<gemm::BlasLibrary> lt = gemm::cublaslt_library();
  const std::optional<std::string> lt_version =
      lt ? std::optional<std::string>(lt->version) : std::nullopt;
  const std::optional<std::string> lt_file =
      lt && !lt->path.empty() ? std::optional<std::string>(lt->path) : std::nullopt;
  return {{"meshgate", MESHGATE_VERSION},
          {"cuda", or_null(cuda)},
          {"nccl", or_null(nccl)},
          {"mpi", or_null(mpi)},
          {"cublaslt", or_null(lt_version)},
          {"cublaslt_library", or_null(lt_file)}};
}

nlohmann::ordered_json machine_info(const nlohmann::ordered_json& versions) {
  const std::string cpu = cpu_model();
  const unsigned cores = std::thread::hardware_concurrency();
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  nlohmann::ordered_json driver = nullptr;  // the CUDA driver's version, null without one
#ifdef MESHGATE_HAVE_NCCL
  for (const std::string& name : comm::cuda_device_names()) gpus.push_back(name);
  if (const std::string d = comm::cuda_driver_version(); !d.empty()) driver = d;
#endif
  const std::string identity = cpu + "|" + std::to_string(cores) + "|" + gpus.dump() + "|" +
                               driver.dump() + "|" + versions.dump();
  return {{"host", host_name()}, {"cpu", cpu},       {"cores", cores},
          {"gpus", gpus},        {"driver", driver}, {"fingerprint", stable_hash(identity)}};
}

std::string utc_timestamp_now() {
  return format_utc(std::time(nullptr), "%Y-%m-%dT%H:%M:%SZ");
}

std::string new_run_id() {
  std::random_device random;
  std::array<char, 8> suffix{};
  std::snprintf(suffix.data(), suffix.size(), "%06x", random() & 0xffffffu);
  return format_utc(std::time(nullptr), "%Y%m%dT%H%M%SZ") + "-" + suffix.data();
}

nlohmann::ordered_json run_info(const std::string& run_id, const std::string& started,
                                const std::string& backend, int world_size,
                                const nlohmann::ordered_json& versions) {
  const CommitInfo commit = commit_info();
  return {{"id", run_id},
          {"started", started},
          {"commit", commit.commit},
          {"dirty", commit.dirty},
          {"backend", backend},
          {"world_size", world_size},
          {"machine", machine_info(versions)},
          {"versions", versions}};
}

nlohmann::ordered_json build_info() {
  nlohmann::ordered_json backends = nlohmann::ordered_json::array({"threads"});
#ifdef MESHGATE_HAVE_MPI
  backends.push_back("mpi");
#endif
#ifdef MESHGATE_HAVE_NCCL
  backends.push_back("nccl");
#endif
  const CommitInfo commit = commit_info();
  const nlohmann::ordered_json versions = versions_info();
  // The machine as a run's results describe it, so that the driver can name the machine class
  // (and check what is stored for it) before it runs anything.
  return {{"version", MESHGATE_VERSION},
          {"commit", commit.commit},
          {"dirty", commit.dirty},
          {"backends", backends},
          {"cuda", versions["cuda"]},
          {"machine", machine_info(versions)}};
}

std::string version_text() {
  const nlohmann::ordered_json info = build_info();
  std::string backends;
  for (const auto& b : info["backends"]) backends += (backends.empty() ? "" : ", ") + b.get<std::string>();
  std::string text = "meshgate-runner " + info["version"].get<std::string>() + " (commit " +
                     info["commit"].get<std::string>() + (info["dirty"].get<bool>() ? ", dirty" : "") +
                     "); backends: " + backends;
  if (info["cuda"].is_string()) text += "; CUDA " + info["cuda"].get<std::string>();
  return text;
}

}  // namespace meshgate::runner

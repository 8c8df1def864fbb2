#pragma once
// What the host was doing to a run's timings: the CPUs the runner is pinned to (--cpus), the
// CPU frequency governor and the load average when the run started. The run header records
// them (docs/results.md), so that a noisy comparison can be traced to a busy or unpinned host.
#include <array>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshgate::runner {

// The CPUs of a list as taskset writes them: "0", "0-3", "0,2", "0-3,8,10-11". Sorted, without
// repeats; nullopt when `text` is not such a list (a reversed range, a CPU number past what the
// kernel's CPU sets hold included).
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);

// The list in that form, ranges joined: {0, 1, 2, 5} is "0-2,5".
std::string format_cpu_list(const std::vector<int>& cpus);

// The CPUs the calling thread may run on (sched_getaffinity).
std::vector<int> allowed_cpus();

// Pins the calling thread to `cpus`; every thread and process it starts afterwards (rank
// threads, isolated cases, implementations under test) inherits the pinning. The previous set
// comes back when the object is destroyed, so that a caller that goes on (a test) is not left
// pinned. Throws std::runtime_error, naming --cpus, when a CPU of the list is not available to
// this process (offline, or outside its cpuset): the kernel would drop it silently.
class CpuPinning {
 public:
  explicit CpuPinning(const std::vector<int>& cpus);
  ~CpuPinning();
  CpuPinning(const CpuPinning&) = delete;
  CpuPinning& operator=(const CpuPinning&) = delete;

 private:
  std::vector<int> previous_;
};

// The scaling governor of `cpus` under `sysfs_cpu_dir` (cpuN/cpufreq/scaling_governor): one
// name, or the different names of the CPUs joined with ","; nullopt when none of them has the
// file (no cpufreq driver, e.g. in most virtual machines).
std::optional<std::string> cpu_governor(
    const std::vector<int>& cpus,
    const std::filesystem::path& sysfs_cpu_dir = "/sys/devices/system/cpu");

// The 1, 5 and 15 minute load averages (getloadavg); nullopt when the system does not say.
std::optional<std::array<double, 3>> load_average();

// The run header's "cpus" (the CPUs the runner is pinned to, or null when it is not pinned),
// "cpu_governor" (of the CPUs it may use, or null) and "load_average" ([1, 5, 15 min], or
// null), read now.
nlohmann::ordered_json host_state(bool pinned);

}  // namespace meshgate::runner

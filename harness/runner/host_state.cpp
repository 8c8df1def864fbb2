#include "host_state.hpp"

#include <sched.h>
#include <stdlib.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>

namespace meshgate::runner {

namespace {

std::optional<int> parse_cpu_number(std::string_view text) {
  int value = -1;
  const char* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || at != end || value < 0 || value >= CPU_SETSIZE) {
    return std::nullopt;
  }
  return value;
}

cpu_set_t to_cpu_set(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int cpu : cpus) CPU_SET(cpu, &set);
  return set;
}

bool set_affinity(const std::vector<int>& cpus) {
  const cpu_set_t set = to_cpu_set(cpus);
  return ::sched_setaffinity(0, sizeof set, &set) == 0;
}

}  // namespace

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  std::set<int> cpus;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const std::size_t dash = item.find('-');
    const std::optional<int> first = parse_cpu_number(item.substr(0, dash));
    const std::optional<int> last =
        dash == std::string_view::npos ? first : parse_cpu_number(item.substr(dash + 1));
    if (!first || !last || *last < *first) return std::nullopt;
    for (int cpu = *first; cpu <= *last; ++cpu) cpus.insert(cpu);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

CpuPinning::CpuPinning(const std::vector<int>& cpus) : previous_(allowed_cpus()) {
  // The kernel pins to the CPUs of the list that this process may use and fails only when
  // there is none: reading the set back tells whether the whole list was taken.
  const bool pinned = set_affinity(cpus);
  const std::vector<int> now = pinned ? allowed_cpus() : std::vector<int>{};
  if (now == cpus) return;
  if (pinned) set_affinity(previous_);
  std::vector<int> missing;
  std::set_difference(cpus.begin(), cpus.end(), now.begin(), now.end(),
                      std::back_inserter(missing));
  throw std::runtime_error("--cpus " + format_cpu_list(cpus) +
                           ": not available to this process: CPU " + format_cpu_list(missing) +
                           " (it may use CPUs " + format_cpu_list(previous_) + ")");
}

// The set this process had a moment ago; if the kernel refuses it now there is nothing better.
CpuPinning::~CpuPinning() { set_affinity(previous_); }

std::optional<std::string> cpu_governor(const std::vector<int>& cpus,
                                        const std::filesystem::path& sysfs_cpu_dir) {
  std::set<std::string> names;
  for (const int cpu : cpus) {
    std::ifstream file(sysfs_cpu_dir / ("cpu" + std::to_string(cpu)) / "cpufreq" /
                       "scaling_governor");
    std::string name;
    if (file >> name) names.insert(name);
  }
  if (names.empty()) return std::nullopt;
  std::string joined;
  for (const std::string& name : names) joined += (joined.empty() ? "" : ",") + name;
  return joined;
}

std::optional<std::array<double, 3>> load_average() {
  std::array<double, 3> loads{};
  if (::getloadavg(loads.data(), 3) != 3) return std::nullopt;
  return loads;
}

nlohmann::ordered_json host_state(bool pinned) {
  const std::vector<int> cpus = allowed_cpus();
  const std::optional<std::string> governor = cpu_governor(cpus);
  const std::optional<std::array<double, 3>> loads = load_average();
  return {{"cpus", pinned ? nlohmann::ordered_json(cpus) : nlohmann::ordered_json()},
          {"cpu_governor", governor ? nlohmann::ordered_json(*governor) : nlohmann::ordered_json()},
          {"load_average", loads ? nlohmann::ordered_json(*loads) : nlohmann::ordered_json()}};
}

}  // namespace meshgate::runner

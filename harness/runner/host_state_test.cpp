#include "host_state.hpp"

#include <gtest/gtest.h>

#include <sched.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace meshgate::runner {
namespace {

namespace fs = std::filesystem;

TEST(CpuList, TasksetForms) {
  EXPECT_EQ(parse_cpu_list("0"), (std::vector<int>{0}));
  EXPECT_EQ(parse_cpu_list("0-1"), (std::vector<int>{0, 1}));
  EXPECT_EQ(parse_cpu_list("0,2"), (std::vector<int>{0, 2}));
  EXPECT_EQ(parse_cpu_list("8,0-3,2"), (std::vector<int>{0, 1, 2, 3, 8}));
  EXPECT_EQ(parse_cpu_list("5-5"), (std::vector<int>{5}));
  for (const char* bad : {"", ",", "0,", "a", "1-0", "-1", "0-", "1 2", "0x1", "+1", "0..3",
                          "99999"}) {
    EXPECT_FALSE(parse_cpu_list(bad).has_value()) << bad;
  }
  EXPECT_EQ(format_cpu_list({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(format_cpu_list({3}), "3");
  EXPECT_EQ(format_cpu_list({}), "");
}

TEST(CpuPinning, PinsThisThreadAndTheThreadsItStartsThenRestores) {
  const std::vector<int> before = allowed_cpus();
  ASSERT_FALSE(before.empty());
  const std::vector<int> one = {before.back()};
  {
    const CpuPinning pinning(one);
    EXPECT_EQ(allowed_cpus(), one);
    std::vector<int> in_thread;
    std::thread([&] { in_thread = allowed_cpus(); }).join();
    EXPECT_EQ(in_thread, one);
  }
  EXPECT_EQ(allowed_cpus(), before);
}

TEST(CpuPinning, ACpuThisProcessCannotUseIsAnErrorNamingTheOptionAndLeavesTheSetAlone) {
  const std::vector<int> before = allowed_cpus();
  try {
    const CpuPinning pinning({CPU_SETSIZE - 1});
    FAIL() << "pinned to CPU " << CPU_SETSIZE - 1;
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("--cpus " + std::to_string(CPU_SETSIZE - 1) +
                                ": not available to this process: CPU",
                            0),
              0u)
        << message;
    EXPECT_NE(message.find("it may use CPUs " + format_cpu_list(before)), std::string::npos)
        << message;
  }
  // Partly available: the kernel would take the available part; the runner refuses.
  try {
    const CpuPinning pinning({before.front(), CPU_SETSIZE - 1});
    FAIL() << "pinned to a list with CPU " << CPU_SETSIZE - 1;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("CPU " + std::to_string(CPU_SETSIZE - 1) + " ("),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(allowed_cpus(), before);
}

TEST(HostState, GovernorFromSysfsAndNullWithoutCpufreq) {
  const fs::path root = fs::temp_directory_path() / "meshgate_host_state_test";
  fs::remove_all(root);
  const auto governor = [&](int cpu, const std::string& name) {
    fs::create_directories(root / ("cpu" + std::to_string(cpu)) / "cpufreq");
    std::ofstream(root / ("cpu" + std::to_string(cpu)) / "cpufreq" / "scaling_governor")
        << name << "\n";
  };
  EXPECT_FALSE(cpu_governor({0, 1}, root).has_value());
  governor(0, "performance");
  governor(1, "performance");
  EXPECT_EQ(cpu_governor({0, 1}, root), "performance");
  governor(2, "powersave");
  EXPECT_EQ(cpu_governor({0, 1, 2}, root), "performance,powersave");
  EXPECT_EQ(cpu_governor({2, 3}, root), "powersave");
  fs::remove_all(root);
}

TEST(HostState, HeaderFields) {
  const nlohmann::ordered_json unpinned = host_state(false);
  EXPECT_TRUE(unpinned["cpus"].is_null());
  EXPECT_TRUE(unpinned["cpu_governor"].is_null() || unpinned["cpu_governor"].is_string());
  ASSERT_TRUE(unpinned["load_average"].is_array());
  ASSERT_EQ(unpinned["load_average"].size(), 3u);
  for (const auto& load : unpinned["load_average"]) EXPECT_GE(load.get<double>(), 0.0);
  EXPECT_EQ(host_state(true)["cpus"], nlohmann::ordered_json(allowed_cpus()));
}

}  // namespace
}  // namespace meshgate::runner

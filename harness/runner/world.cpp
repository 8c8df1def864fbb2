#include "world.hpp"

#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace meshgate::runner {

ThreadsWorld::ThreadsWorld(int world_size) : world_size_(world_size) {
  if (world_size < 1) {
    throw std::invalid_argument("a threads world needs at least 1 rank, got " +
                                std::to_string(world_size));
  }
}

void ThreadsWorld::run_on_ranks(int ranks, const std::function<void(int rank)>& fn) {
  if (ranks < 1 || ranks > world_size_) {
    throw std::invalid_argument("run_on_ranks(" + std::to_string(ranks) + "): the world has " +
                                std::to_string(world_size_) + " ranks; a case may use 1 to " +
                                std::to_string(world_size_));
  }
  std::mutex mutex;
  std::optional<RankFailure> first_failure;
  const auto record = [&](int rank, std::string message) {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!first_failure) first_failure.emplace(rank, message);
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(ranks));
  try {
    for (int rank = 0; rank < ranks; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          fn(rank);
        } catch (const std::exception& e) {
          record(rank, e.what());
        } catch (...) {
          record(rank, "an exception that is not a std::exception");
        }
      });
    }
  } catch (const std::system_error& e) {
    // The ranks already started may wait for the missing ones; the case's watchdog ends that.
    for (std::thread& thread : threads) thread.join();
    throw std::runtime_error("could not start rank thread " + std::to_string(threads.size()) +
                             " of " + std::to_string(ranks) + ": " + e.what());
  }
  for (std::thread& thread : threads) thread.join();
  if (first_failure) throw *first_failure;
}

}  // namespace meshgate::runner

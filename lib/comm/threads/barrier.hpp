#pragma once
// A reusable barrier for the rank threads of one group: the last thread to arrive opens the
// next generation. Arrivals are acq_rel read-modify-writes on one counter and the opening is a
// release store that waiters acquire, so every write a rank made before arriving is visible to
// every rank after the barrier (the happens-before edge the collectives rely on, and the one
// ThreadSanitizer checks). Waiters spin briefly, then sleep in atomic::wait (a futex), because
// rank threads usually outnumber the cores.
#include <atomic>
#include <cstdint>
#include <thread>

namespace meshgate::comm::threads {

class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  Barrier(const Barrier&) = delete;
  Barrier& operator=(const Barrier&) = delete;

  void arrive_and_wait() {
    const std::uint32_t generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == count_) {
      // Nobody of this generation touches arrived_ again, and the next generation's arrivals
      // happen after they acquire the new generation below, so a relaxed reset is ordered.
      arrived_.store(0, std::memory_order_relaxed);
      generation_.store(generation + 1, std::memory_order_release);
      generation_.notify_all();
      return;
    }
    for (int spin = 0; spin < kSpins; ++spin) {
      if (generation_.load(std::memory_order_acquire) != generation) return;
      std::this_thread::yield();
    }
    while (generation_.load(std::memory_order_acquire) == generation) {
      generation_.wait(generation, std::memory_order_acquire);
    }
  }

 private:
  static constexpr int kSpins = 64;
  const int count_;
  std::atomic<int> arrived_{0};
  std::atomic<std::uint32_t> generation_{0};
};

}  // namespace meshgate::comm::threads

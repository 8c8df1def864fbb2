#pragma once
// The embedded `threads` backend: every rank is a real thread of this process.
#include <functional>
#include <string_view>

#include "case_kind.hpp"

namespace meshgate::runner {

class ThreadsWorld final : public RunContext {
 public:
  explicit ThreadsWorld(int world_size);

  std::string_view backend() const override { return "threads"; }
  int world_size() const override { return world_size_; }
  // Starts one thread per rank, joins them all, then rethrows the failure that happened first
  // (in time) as RankFailure; a failing rank does not stop the others.
  void run_on_ranks(int ranks, const std::function<void(int rank)>& fn) override;

 private:
  int world_size_;
};

}  // namespace meshgate::runner

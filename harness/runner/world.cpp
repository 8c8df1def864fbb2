#include "world.hpp"

#include <cstdint>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace meshgate::runner {

namespace {

// What a rank caught, in a form that crosses process boundaries: the ErrorKind of a
// meshgate::Error (its message without the "KeyError: " prefix), or -1 and what() otherwise.
struct Failure {
  std::int64_t kind = -1;
  std::string message;
};

Failure describe(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const comm::CollectiveFault& e) {
    // Ranks that called a collective differently, or a world aborted under them: a fault of
    // the code the ranks ran, never the library rejecting the case's input.
    return {-1, e.what()};
  } catch (const comm::BackendError& e) {
    // The backend could not carry out a call (an op it lacks, a count past its limit, a failed
    // MPI or NCCL call): the case could not run, which is an error, not a wrong answer.
    return {-1, e.what()};
  } catch (const meshgate::Error& e) {
    const std::string prefix = std::string(python_name(e.kind())) + ": ";
    std::string message = e.what();
    if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
    return {static_cast<std::int64_t>(e.kind()), std::move(message)};
  } catch (const std::bad_alloc& e) {
    return {-1, std::string("ran out of host memory (") + e.what() + ")"};
  } catch (const std::length_error& e) {
    return {-1, std::string("ran out of host memory (") + e.what() + ")"};
  } catch (const std::exception& e) {
    return {-1, e.what()};
  } catch (...) {
    return {-1, "an exception that is not a std::exception"};
  }
}

[[noreturn]] void raise(int rank, const Failure& failure) {
  if (failure.kind >= 0)
    throw meshgate::Error(static_cast<ErrorKind>(failure.kind), failure.message);
  throw RankFailure(rank, failure.message);
}

void check_ranks(int ranks, int world_size) {
  if (ranks < 1 || ranks > world_size) {
    throw std::invalid_argument("run_on_ranks(" + std::to_string(ranks) + "): the world has " +
                                std::to_string(world_size) + " ranks; a case may use 1 to " +
                                std::to_string(world_size));
  }
}

}  // namespace

ThreadsContext::ThreadsContext(int world_size, std::optional<PerfSpec> perf,
                               double case_timeout_s)
    : world_size_(world_size), perf_(perf), case_timeout_s_(case_timeout_s) {
  if (world_size < 1) {
    throw std::invalid_argument("a threads world needs at least 1 rank, got " +
                                std::to_string(world_size));
  }
}

ThreadsContext::~ThreadsContext() = default;

void ThreadsContext::run_on_ranks(
    int ranks, const std::function<void(int rank, comm::Communicator& comm)>& fn) {
  check_ranks(ranks, world_size_);
  if (comms_.size() != static_cast<std::size_t>(ranks)) {
    comms_.clear();
    world_ = std::make_unique<comm::ThreadsWorld>(ranks);
    for (int rank = 0; rank < ranks; ++rank) comms_.push_back(world_->communicator(rank));
  }
  std::mutex mutex;
  std::exception_ptr first_failure;
  int failed_rank = -1;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(ranks));
  try {
    for (int rank = 0; rank < ranks; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          fn(rank, *comms_[static_cast<std::size_t>(rank)]);
        } catch (...) {
          std::string reason;
          {
            const std::lock_guard<std::mutex> lock(mutex);
            if (first_failure) return;  // later, often a peer woken by the abort below
            first_failure = std::current_exception();
            failed_rank = rank;
            reason = "rank " + std::to_string(rank) + " failed: " + describe(first_failure).message;
          }
          // Its peers may wait in a collective for this rank, which will never join it: wake
          // them with an error instead of leaving the case hanging until its timeout.
          world_->abort(reason);
        }
      });
    }
  } catch (const std::system_error& e) {
    // The ranks already started would wait for the missing ones.
    world_->abort("rank thread " + std::to_string(threads.size()) + " could not start");
    for (std::thread& thread : threads) thread.join();
    comms_.clear();
    throw std::runtime_error("could not start rank thread " + std::to_string(threads.size()) +
                             " of " + std::to_string(ranks) + ": " + e.what());
  }
  for (std::thread& thread : threads) thread.join();
  if (first_failure) {
    comms_.clear();
    raise(failed_rank, describe(first_failure));
  }
}

ProcessContext::ProcessContext(std::string backend, comm::Communicator& case_comm,
                               comm::Communicator& control, int world_size,
                               std::optional<PerfSpec> perf, double case_timeout_s)
    : backend_(std::move(backend)),
      case_comm_(case_comm),
      control_(control),
      world_size_(world_size),
      perf_(perf),
      case_timeout_s_(case_timeout_s) {}

void ProcessContext::run_on_ranks(
    int ranks, const std::function<void(int rank, comm::Communicator& comm)>& fn) {
  check_ranks(ranks, case_comm_.size());
  std::exception_ptr failure;
  try {
    std::unique_ptr<comm::Communicator> smaller;
    comm::Communicator* comm = &case_comm_;
    if (ranks < case_comm_.size()) {
      std::vector<int> group;
      for (int r = 0; r < ranks; ++r) group.push_back(r);
      smaller = case_comm_.split({group});
      comm = smaller.get();
    }
    if (comm != nullptr) fn(case_comm_.rank(), *comm);
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_failure(control_, failure);
}

std::int64_t ProcessContext::agree_on_calls(std::int64_t calls) {
  std::int64_t largest = 0;
  control_.all_reduce(&calls, &largest, 1, comm::DType::i64, comm::ReduceOp::max);
  return largest;
}

void agree_on_failure(comm::Communicator& comm, std::exception_ptr failure) {
  const std::int64_t mine = failure ? comm.rank() : comm.size();
  std::int64_t lowest = 0;
  comm.all_reduce(&mine, &lowest, 1, comm::DType::i64, comm::ReduceOp::min);
  if (lowest >= comm.size()) return;
  const int root = static_cast<int>(lowest);
  Failure what;
  if (comm.rank() == root) what = describe(failure);
  std::int64_t header[2] = {what.kind, static_cast<std::int64_t>(what.message.size())};
  comm.broadcast(header, header, 2, comm::DType::i64, root);
  what.kind = header[0];
  what.message.resize(static_cast<std::size_t>(header[1]));
  if (header[1] > 0) {
    comm.broadcast(what.message.data(), what.message.data(), what.message.size(), comm::DType::u8,
                   root);
  }
  raise(root, what);
}

bool all_ranks_agree(comm::Communicator& comm, bool ok) {
  const std::int64_t mine = ok ? 1 : 0;
  std::int64_t all = 0;
  comm.all_reduce(&mine, &all, 1, comm::DType::i64, comm::ReduceOp::min);
  return all == 1;
}

}  // namespace meshgate::runner

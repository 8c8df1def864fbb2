// The threads backend. Every collective follows the same pattern: each rank publishes its
// buffer pointers in its own slot, a barrier makes them visible, each rank then does its share
// of the work reading its peers' buffers directly (all ranks in parallel), and a final barrier
// keeps every buffer alive and unchanged until all peers are done reading it.
#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "comm/host_reduce.hpp"
#include "comm/threads/barrier.hpp"
#include "comm/threads_world.hpp"
#include "core/error.hpp"

namespace meshgate::comm {
namespace threads {

constexpr std::string_view kBackend = "threads";
// Chunk boundaries and slots sit on separate cache lines so ranks never write the same line.
constexpr std::size_t kCacheLine = 64;

// A rank's scratch memory (in-place all_to_all), grown on demand and never shrunk. Only its
// owner resizes it, and only between collectives, when no peer reads it.
class Scratch {
 public:
  std::byte* get(std::size_t bytes) {
    if (bytes > capacity_) {
      data_.reset(new (std::align_val_t{kCacheLine}) std::byte[bytes]);
      capacity_ = bytes;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{kCacheLine}); }
  };
  std::unique_ptr<std::byte[], Free> data_;
  std::size_t capacity_ = 0;
};

// What a rank publishes to its peers. Written only by its owner before a barrier, read by
// peers only after it.
struct alignas(kCacheLine) Slot {
  const void* send = nullptr;
  void* recv = nullptr;
  Scratch scratch;
  std::shared_ptr<GroupState> child;  // split: the group state its leader created
};

struct GroupState {
  explicit GroupState(int n) : size(n), barrier(n), slots(static_cast<std::size_t>(n)) {}
  const int size;
  Barrier barrier;
  std::vector<Slot> slots;
};

namespace {

const std::byte* bytes(const void* p) {
  return static_cast<const std::byte*>(p);
}
std::byte* bytes(void* p) {
  return static_cast<std::byte*>(p);
}

// all_reduce's chunks: equal runs of whole cache lines (the last one shorter), so that the
// reduction of each chunk is done by one rank.
struct Chunking {
  Chunking(std::size_t elements, std::size_t element, int ranks) : count(elements) {
    const std::size_t per_line = std::max<std::size_t>(1, kCacheLine / element);
    const std::size_t even = (elements + ranks - 1) / ranks;
    length = (even + per_line - 1) / per_line * per_line;
  }
  std::size_t begin(int r) const { return std::min(count, length * static_cast<std::size_t>(r)); }
  std::size_t end(int r) const { return begin(r + 1); }
  std::size_t count;
  std::size_t length;
};

class ThreadsCommunicator final : public Communicator {
 public:
  ThreadsCommunicator(std::shared_ptr<GroupState> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  std::string_view backend() const override { return kBackend; }
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }

  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                  ReduceOp op) override {
    check_reduce("all_reduce", op, dtype);
    check_buffers("all_reduce", send, recv, count);
    const std::size_t es = element_size(dtype);
    const int n = size();
    if (count == 0) return;
    if (n == 1) {
      if (send != recv) std::memcpy(recv, send, count * es);
      return;
    }
    Slot& me = mine();
    me.send = send;
    me.recv = recv;
    const Chunking chunks(count, es, n);
    const std::size_t lo = chunks.begin(rank_);
    const std::size_t hi = chunks.end(rank_);
    sync();

    // Reduce-scatter: this rank reduces its chunk from every peer's input, in rank order, into
    // the same chunk of its own output. In place that overwrites its own input chunk, which no
    // peer reads: peers read only their own chunk of everyone's input.
    std::vector<const void*> srcs(static_cast<std::size_t>(n));
    for (int j = 0; j < n; ++j) srcs[j] = bytes(group_->slots[j].send) + lo * es;
    if (hi > lo) reduce_sources(srcs, bytes(recv) + lo * es, hi - lo, dtype, op);
    sync();

    // All-gather: copy every peer's reduced chunk from its output into this rank's output.
    // Each rank writes only the peers' chunks of its own output and reads only the owners'
    // chunks of the others', so no chunk is written and read at once.
    for (int j = 0; j < n; ++j) {
      const std::size_t jlo = chunks.begin(j);
      const std::size_t jhi = chunks.end(j);
      if (j == rank_ || jhi == jlo) continue;
      std::memcpy(bytes(recv) + jlo * es, bytes(group_->slots[j].recv) + jlo * es,
                  (jhi - jlo) * es);
    }
    sync();
  }

  void all_gather(const void* send, void* recv, std::size_t count, DType dtype) override {
    check_buffers("all_gather", send, recv, count);
    const std::size_t block = count * element_size(dtype);
    if (count == 0) return;
    mine().send = send;
    sync();
    for (int j = 0; j < size(); ++j) {
      std::byte* dst = bytes(recv) + static_cast<std::size_t>(j) * block;
      const void* src = group_->slots[j].send;
      if (src != dst) std::memcpy(dst, src, block);
    }
    sync();
  }

  void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                      ReduceOp op) override {
    check_reduce("reduce_scatter", op, dtype);
    check_buffers("reduce_scatter", send, recv, count);
    if (count == 0) return;
    const std::size_t block = count * element_size(dtype);
    mine().send = send;
    sync();
    // Every rank reduces its own block from all inputs, in rank order. In place, recv is this
    // rank's own input block: reduce_sources reads each piece before writing it, and no peer
    // reads that block.
    std::vector<const void*> srcs(static_cast<std::size_t>(size()));
    for (int j = 0; j < size(); ++j) {
      srcs[j] = bytes(group_->slots[j].send) + static_cast<std::size_t>(rank_) * block;
    }
    reduce_sources(srcs, recv, count, dtype, op);
    sync();
  }

  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype) override {
    check_buffers("all_to_all", send, recv, count);
    if (count == 0) return;
    const std::size_t block = count * element_size(dtype);
    Slot& me = mine();
    // In place, peers would read blocks this rank is overwriting: publish a copy instead.
    if (send == recv) {
      std::byte* copy = me.scratch.get(block * static_cast<std::size_t>(size()));
      std::memcpy(copy, send, block * static_cast<std::size_t>(size()));
      me.send = copy;
    } else {
      me.send = send;
    }
    sync();
    for (int j = 0; j < size(); ++j) {
      std::memcpy(bytes(recv) + static_cast<std::size_t>(j) * block,
                  bytes(group_->slots[j].send) + static_cast<std::size_t>(rank_) * block, block);
    }
    sync();
  }

  void broadcast(void* buffer, std::size_t count, DType dtype, int root) override {
    if (root < 0 || root >= size()) {
      throw Error(ErrorKind::value, "broadcast: root " + std::to_string(root) +
                                        " is not a rank of this group of " +
                                        std::to_string(size()) + " ranks");
    }
    check_buffers("broadcast", buffer, buffer, count);
    if (count == 0) return;
    if (rank_ == root) mine().send = buffer;
    sync();
    if (rank_ != root) std::memcpy(buffer, group_->slots[root].send, count * element_size(dtype));
    sync();
  }

  void barrier() override { sync(); }

  std::unique_ptr<Communicator> split(const std::vector<std::vector<int>>& groups) override {
    // Every rank checks the same list the same way, so either all ranks throw or none does.
    const auto [group_index, position] = locate_rank(groups, size(), rank_);
    const bool member = group_index >= 0;
    const int leader = member ? groups[group_index][0] : -1;
    if (leader == rank_) {
      mine().child = std::make_shared<GroupState>(static_cast<int>(groups[group_index].size()));
    }
    sync();
    std::shared_ptr<GroupState> child = member ? group_->slots[leader].child : nullptr;
    sync();
    if (leader == rank_) mine().child.reset();
    if (!member) return nullptr;
    return std::make_unique<ThreadsCommunicator>(std::move(child), position);
  }

  void* allocate(std::size_t bytes_wanted) override {
    return ::operator new (std::max<std::size_t>(bytes_wanted, 1), std::align_val_t{kCacheLine});
  }
  void deallocate(void* ptr) override {
    if (ptr) ::operator delete (ptr, std::align_val_t{kCacheLine});
  }
  void copy_from_host(void* dst, const void* src, std::size_t n) override {
    if (n) std::memcpy(dst, src, n);
  }
  void copy_to_host(void* dst, const void* src, std::size_t n) override {
    if (n) std::memcpy(dst, src, n);
  }
  void synchronize() override {}

 private:
  Slot& mine() { return group_->slots[static_cast<std::size_t>(rank_)]; }
  void sync() { group_->barrier.arrive_and_wait(); }

  static void check_reduce(std::string_view collective, ReduceOp op, DType dtype) {
    if (op == ReduceOp::avg && !is_floating(dtype)) {
      throw unsupported(kBackend, collective, op, dtype,
                        "avg is defined for floating-point dtypes only; use sum and divide");
    }
  }

  static void check_buffers(std::string_view collective, const void* send, const void* recv,
                            std::size_t count) {
    if (count > 0 && (send == nullptr || recv == nullptr)) {
      throw Error(ErrorKind::value, std::string(collective) + ": null buffer for " +
                                        std::to_string(count) + " elements");
    }
  }

  std::shared_ptr<GroupState> group_;
  int rank_;
};

}  // namespace
}  // namespace threads

ThreadsWorld::ThreadsWorld(int size) : size_(size) {
  if (size < 1) {
    throw Error(ErrorKind::value,
                "threads world size must be at least 1, got " + std::to_string(size));
  }
  group_ = std::make_shared<threads::GroupState>(size);
  taken_ = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size));
}

ThreadsWorld::~ThreadsWorld() = default;

std::unique_ptr<Communicator> ThreadsWorld::communicator(int rank) {
  if (rank < 0 || rank >= size_) {
    throw Error(ErrorKind::value, "threads world has ranks [0, " + std::to_string(size_) +
                                      "), not " + std::to_string(rank));
  }
  if (taken_[rank].exchange(true)) {
    throw Error(ErrorKind::value, "rank " + std::to_string(rank) +
                                      " of the threads world already has its communicator");
  }
  return std::make_unique<threads::ThreadsCommunicator>(group_, rank);
}

}  // namespace meshgate::comm

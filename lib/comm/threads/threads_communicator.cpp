// The threads backend. Every collective follows the same pattern: each rank publishes its
// buffer pointers and the call it is making in its own slot, a barrier makes them visible, each
// rank checks that every peer makes the same call (a mismatch would read past a peer's buffer
// or leave a rank waiting for ever), then does its share of the work reading its peers' buffers
// directly (all ranks in parallel), and a final barrier keeps every buffer alive and unchanged
// until all peers are done reading it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <utility>
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

// One collective as a rank called it, compared with every peer's before any buffer is read.
struct Call {
  std::uint64_t sequence = 0;   // the rank's calls on this group so far, this one included
  std::string_view collective;  // a literal
  std::size_t count = 0;
  DType dtype = DType::u8;
  ReduceOp op = ReduceOp::sum;  // reductions; sum otherwise
  int root = -1;                // broadcast; -1 otherwise
  // split: the caller's argument, alive while its owner waits in the call.
  const std::vector<std::vector<int>>* groups = nullptr;
  friend bool operator==(const Call& a, const Call& b) {
    const bool same_groups = a.groups == b.groups ||
                             (a.groups != nullptr && b.groups != nullptr && *a.groups == *b.groups);
    return a.sequence == b.sequence && a.collective == b.collective && a.count == b.count &&
           a.dtype == b.dtype && a.op == b.op && a.root == b.root && same_groups;
  }
};

// What a rank publishes to its peers. Written only by its owner before a barrier, read by
// peers only after it.
struct alignas(kCacheLine) Slot {
  const void* send = nullptr;
  void* recv = nullptr;
  Call call;
  Scratch scratch;
  std::shared_ptr<GroupState> child;  // split: the group state its leader created
};

// What every group of one world shares: whether the world was aborted and why, and the
// barriers of its live groups, which an abort wakes wherever their ranks wait.
struct WorldState {
  std::mutex mutex;
  bool aborted = false;
  std::string reason;
  std::vector<Barrier*> barriers;

  void abort(const std::string& why) {
    const std::lock_guard<std::mutex> lock(mutex);
    if (aborted) return;
    aborted = true;
    reason = why;
    for (Barrier* b : barriers) b->abort();
  }
  std::string why() {
    const std::lock_guard<std::mutex> lock(mutex);
    return reason;
  }
};

struct GroupState {
  GroupState(int n, std::shared_ptr<WorldState> w)
      : size(n), barrier(n), slots(static_cast<std::size_t>(n)), world(std::move(w)) {
    const std::lock_guard<std::mutex> lock(world->mutex);
    world->barriers.push_back(&barrier);
    // A group split while the world is being aborted must not wait either.
    if (world->aborted) barrier.abort();
  }
  ~GroupState() {
    const std::lock_guard<std::mutex> lock(world->mutex);
    std::erase(world->barriers, &barrier);
  }
  GroupState(const GroupState&) = delete;
  GroupState& operator=(const GroupState&) = delete;

  const int size;
  Barrier barrier;
  std::vector<Slot> slots;
  const std::shared_ptr<WorldState> world;
};

namespace {

const std::byte* bytes(const void* p) {
  return static_cast<const std::byte*>(p);
}
std::byte* bytes(void* p) {
  return static_cast<std::byte*>(p);
}

// "[0, 1], [2, 3]": split's groups, the first few ranks of them.
std::string describe_groups(const std::vector<std::vector<int>>& groups) {
  constexpr std::size_t kShown = 32;
  std::string out;
  std::size_t shown = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    out += (g ? ", [" : "[");
    for (std::size_t i = 0; i < groups[g].size(); ++i) {
      if (shown++ == kShown) return out + "...";
      out += (i ? ", " : "") + std::to_string(groups[g][i]);
    }
    out += "]";
  }
  return out;
}

// "all_reduce(2 x float32, sum)": a call as the mismatch message shows it.
std::string describe(const Call& c) {
  if (c.collective == "barrier") return "barrier()";
  if (c.collective == "split") {
    return "split(" + (c.groups ? describe_groups(*c.groups) : std::string()) + ")";
  }
  std::string out = std::string(c.collective) + "(" + std::to_string(c.count) + " x " +
                    std::string(to_string(c.dtype));
  if (c.collective == "all_reduce" || c.collective == "reduce_scatter") {
    out += ", " + std::string(to_string(c.op));
  }
  if (c.root >= 0) out += ", root=" + std::to_string(c.root);
  return out + ")";
}

// "rank 1", "ranks 0-2, 5": ascending ranks, runs collapsed.
std::string describe_ranks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (i ? ", " : "") + std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
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
    if (n == 1) {
      ++calls_;
      if (count > 0 && send != recv) std::memcpy(recv, send, count * es);
      return;
    }
    Slot& me = mine();
    me.send = send;
    me.recv = recv;
    start({0, "all_reduce", count, dtype, op, -1});
    if (count == 0) {
      sync();
      return;
    }
    const Chunking chunks(count, es, n);
    const std::size_t lo = chunks.begin(rank_);
    const std::size_t hi = chunks.end(rank_);

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
    mine().send = send;
    start({0, "all_gather", count, dtype, ReduceOp::sum, -1});
    for (int j = 0; count > 0 && j < size(); ++j) {
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
    const std::size_t block = count * element_size(dtype);
    mine().send = send;
    start({0, "reduce_scatter", count, dtype, op, -1});
    if (count > 0) {
      // Every rank reduces its own block from all inputs, in rank order. In place, recv is
      // this rank's own input block: reduce_sources reads each piece before writing it, and no
      // peer reads that block.
      std::vector<const void*> srcs(static_cast<std::size_t>(size()));
      for (int j = 0; j < size(); ++j) {
        srcs[j] = bytes(group_->slots[j].send) + static_cast<std::size_t>(rank_) * block;
      }
      reduce_sources(srcs, recv, count, dtype, op);
    }
    sync();
  }

  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype) override {
    check_buffers("all_to_all", send, recv, count);
    const std::size_t block = count * element_size(dtype);
    Slot& me = mine();
    // In place, peers would read blocks this rank is overwriting: publish a copy instead.
    if (send == recv && count > 0) {
      std::byte* copy = me.scratch.get(block * static_cast<std::size_t>(size()));
      std::memcpy(copy, send, block * static_cast<std::size_t>(size()));
      me.send = copy;
    } else {
      me.send = send;
    }
    start({0, "all_to_all", count, dtype, ReduceOp::sum, -1});
    for (int j = 0; count > 0 && j < size(); ++j) {
      std::memcpy(bytes(recv) + static_cast<std::size_t>(j) * block,
                  bytes(group_->slots[j].send) + static_cast<std::size_t>(rank_) * block, block);
    }
    sync();
  }

  void broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root) override {
    if (root < 0 || root >= size()) {
      throw Error(ErrorKind::value, "broadcast: root " + std::to_string(root) +
                                        " is not a rank of this group of " +
                                        std::to_string(size()) + " ranks");
    }
    // Only the root's send is read, so only the root must pass one.
    check_buffers("broadcast", rank_ == root ? send : recv, recv, count);
    if (rank_ == root) mine().send = send;
    start({0, "broadcast", count, dtype, ReduceOp::sum, root});
    // Every rank copies the root's send into its own recv, the root too when out of place. In
    // place the root's recv is that send and no rank writes it.
    const void* src = group_->slots[root].send;
    if (count > 0 && src != recv) std::memcpy(recv, src, count * element_size(dtype));
    sync();
  }

  // Checked like a collective: a rank in a barrier while a peer is in another call would
  // otherwise pass through that call's barriers with it.
  void barrier() override {
    start({0, "barrier", 0, DType::u8, ReduceOp::sum, -1});
    sync();
  }

  std::unique_ptr<Communicator> split(const std::vector<std::vector<int>>& groups) override {
    // Every rank checks the same list the same way, so either all ranks throw or none does;
    // ranks that pass different lists (or make another call) all throw in start(), before a
    // rank could join a group its leader did not make.
    const auto [group_index, position] = locate_rank(groups, size(), rank_);
    const bool member = group_index >= 0;
    const int leader = member ? groups[group_index][0] : -1;
    if (leader == rank_) {
      mine().child =
          std::make_shared<GroupState>(static_cast<int>(groups[group_index].size()), group_->world);
    }
    Call call{0, "split", 0, DType::u8, ReduceOp::sum, -1};
    call.groups = &groups;
    try {
      start(call);
    } catch (...) {
      mine().child.reset();
      throw;
    }
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

  void sync() {
    if (!group_->barrier.arrive_and_wait()) {
      throw CollectiveFault("the threads world was aborted: " + group_->world->why());
    }
  }

  // Publishes this rank's call (its buffers are in its slot already), waits for the group and
  // checks that every peer makes the same call. Every rank reads the same slots, so on a
  // mismatch every rank throws the same CollectiveFault, after a barrier that keeps the slots
  // unchanged until all have read them.
  void start(Call call) {
    call.sequence = ++calls_;
    mine().call = call;
    sync();
    bool same = true;
    for (int j = 0; j < size() && same; ++j) {
      same = group_->slots[static_cast<std::size_t>(j)].call == call;
    }
    if (same) return;
    std::vector<std::pair<Call, std::vector<int>>> calls;
    for (int j = 0; j < size(); ++j) {
      const Call& c = group_->slots[static_cast<std::size_t>(j)].call;
      auto it =
          std::find_if(calls.begin(), calls.end(), [&](const auto& e) { return e.first == c; });
      if (it == calls.end()) {
        calls.push_back({c, {j}});
      } else {
        it->second.push_back(j);
      }
    }
    // The same text on every rank, whichever collective it called.
    std::string message =
        "the " + std::to_string(size()) + " ranks of a group called a collective differently:";
    const bool same_sequence = std::all_of(calls.begin(), calls.end(), [&](const auto& e) {
      return e.first.sequence == calls.front().first.sequence;
    });
    for (std::size_t i = 0; i < calls.size(); ++i) {
      message +=
          (i ? "; " : " ") + describe_ranks(calls[i].second) + " " + describe(calls[i].first);
      if (!same_sequence) message += " as call " + std::to_string(calls[i].first.sequence);
    }
    message +=
        same_sequence
            ? "; every rank of a group makes the same call: collective, count, dtype, op, root"
            : "; the ranks are at different calls on this group (one skipped "
              "or added a collective)";
    sync();
    throw CollectiveFault(message);
  }

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
  std::uint64_t calls_ = 0;  // collectives, barriers and splits this rank made on the group
};

}  // namespace
}  // namespace threads

ThreadsWorld::ThreadsWorld(int size) : size_(size) {
  if (size < 1) {
    throw Error(ErrorKind::value,
                "threads world size must be at least 1, got " + std::to_string(size));
  }
  state_ = std::make_shared<threads::WorldState>();
  group_ = std::make_shared<threads::GroupState>(size, state_);
  taken_ = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size));
}

void ThreadsWorld::abort(const std::string& reason) {
  state_->abort(reason);
}

bool ThreadsWorld::aborted() const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->aborted;
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

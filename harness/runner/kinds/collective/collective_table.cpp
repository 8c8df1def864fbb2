#include "kinds/collective/collective_table.hpp"

#include <array>
#include <vector>

namespace meshgate::runner {
namespace {

using comm::Communicator;

// A ring all_reduce is a reduce_scatter and an all_gather: twice the chunk factor.
double all_reduce_factor(int n) {
  return 2.0 * (n - 1) / n;
}
// One chunk per rank crosses the links, n - 1 of them from other ranks.
double chunk_factor(int n) {
  return static_cast<double>(n - 1) / n;
}
// The whole buffer crosses every link once.
double broadcast_factor(int) {
  return 1.0;
}

bool every_rank_sends(int, int) {
  return true;
}
bool root_sends(int g, int root) {
  return g == root;
}

constexpr std::array kCollectives = {
    CollectiveEntry{
        .name = "all_reduce",
        .reduces = true,
        .has_root = false,
        .chunked = false,
        .send_is_chunk = false,
        .recv_is_chunk = false,
        .in_place_scratch = false,
        .bus_factor = all_reduce_factor,
        .sends_input = every_rank_sends,
        .expected =
            [](std::size_t i, std::size_t, int, int) {
              return ExpectedValue{true, 0, i};
            },
        .call =
            [](Communicator& group, const void* send, void* recv, const CallArgs& a) {
              group.all_reduce(send, recv, a.count, a.dtype, *a.reduce);
            },
    },
    CollectiveEntry{
        .name = "all_gather",
        .reduces = false,
        .has_root = false,
        .chunked = true,
        .send_is_chunk = true,
        .recv_is_chunk = false,
        .in_place_scratch = false,
        .bus_factor = chunk_factor,
        .sends_input = every_rank_sends,
        // Block r of the output is rank r's input.
        .expected =
            [](std::size_t i, std::size_t count, int, int) {
              return ExpectedValue{false, static_cast<int>(i / count), i % count};
            },
        .call = [](Communicator& group, const void* send, void* recv,
                   const CallArgs& a) { group.all_gather(send, recv, a.count, a.dtype); },
    },
    CollectiveEntry{
        .name = "reduce_scatter",
        .reduces = true,
        .has_root = false,
        .chunked = true,
        .send_is_chunk = false,
        .recv_is_chunk = true,
        .in_place_scratch = false,
        .bus_factor = chunk_factor,
        .sends_input = every_rank_sends,
        // Rank g receives block g of the reduction.
        .expected =
            [](std::size_t i, std::size_t count, int g, int) {
              return ExpectedValue{true, 0, static_cast<std::size_t>(g) * count + i};
            },
        .call =
            [](Communicator& group, const void* send, void* recv, const CallArgs& a) {
              group.reduce_scatter(send, recv, a.count, a.dtype, *a.reduce);
            },
    },
    CollectiveEntry{
        .name = "all_to_all",
        .reduces = false,
        .has_root = false,
        .chunked = true,
        .send_is_chunk = false,
        .recv_is_chunk = false,
        .in_place_scratch = true,
        .bus_factor = chunk_factor,
        .sends_input = every_rank_sends,
        // Block r of rank g's output is block g of rank r's input.
        .expected =
            [](std::size_t i, std::size_t count, int g, int) {
              return ExpectedValue{false, static_cast<int>(i / count),
                                   static_cast<std::size_t>(g) * count + i % count};
            },
        .call = [](Communicator& group, const void* send, void* recv,
                   const CallArgs& a) { group.all_to_all(send, recv, a.count, a.dtype); },
    },
    CollectiveEntry{
        .name = "broadcast",
        .reduces = false,
        .has_root = true,
        .chunked = false,
        .send_is_chunk = false,
        .recv_is_chunk = false,
        .in_place_scratch = false,
        .bus_factor = broadcast_factor,
        .sends_input = root_sends,
        .expected =
            [](std::size_t i, std::size_t, int, int root) {
              return ExpectedValue{false, root, i};
            },
        .call = [](Communicator& group, const void* send, void* recv,
                   const CallArgs& a) { group.broadcast(send, recv, a.count, a.dtype, a.root); },
    },
};

}  // namespace

CollectiveBuffers CollectiveEntry::buffers(std::int64_t bytes, std::size_t element_size,
                                           int n) const {
  const auto size = static_cast<std::size_t>(bytes);
  const auto ranks = static_cast<std::size_t>(n);
  const std::size_t elements = size / element_size;
  return {chunked ? elements / ranks : elements, send_is_chunk ? size / ranks : size,
          recv_is_chunk ? size / ranks : size};
}

CollectiveEntry::Pointers CollectiveEntry::in_place(std::byte* send, std::byte* recv,
                                                    std::size_t chunk_bytes, int g) const {
  std::byte* buffer = recv_is_chunk ? send : recv;
  std::byte* chunk = buffer + static_cast<std::size_t>(g) * chunk_bytes;
  return {send_is_chunk ? chunk : buffer, recv_is_chunk ? chunk : buffer};
}

std::span<const CollectiveEntry> collective_table() {
  return kCollectives;
}

const CollectiveEntry* find_collective(std::string_view name) {
  for (const CollectiveEntry& entry : kCollectives) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

std::string collective_names(bool (*pick)(const CollectiveEntry&), std::string_view last) {
  std::vector<std::string_view> names;
  for (const CollectiveEntry& entry : kCollectives) {
    if (pick(entry)) names.push_back(entry.name);
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? last : std::string_view(", ");
    out += names[i];
  }
  return out;
}

}  // namespace meshgate::runner

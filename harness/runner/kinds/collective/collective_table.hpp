#pragma once
// The collectives of the collective kind, one table entry each, as nccl-tests keeps one
// testColl per collective: how a size becomes buffers and an element count, what each rank
// sends, what each output element must be, the bus-bandwidth factor, and the call itself.
// Everything the kind does that depends on the op reads it here.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "comm/communicator.hpp"

namespace meshgate::runner {

// The buffers of one call of a size of `bytes` (nccl-tests' size: the larger of the rank's
// two buffers), per rank.
struct CollectiveBuffers {
  std::size_t count = 0;       // the element count of the Communicator call
  std::size_t send_bytes = 0;  // the send buffer
  std::size_t recv_bytes = 0;  // the receive buffer
};

// The generated value an output element must hold: the op's reduction over the group of
// input element `index`, or input element `index` of group rank `rank`.
struct ExpectedValue {
  bool reduced = false;
  int rank = 0;
  std::uint64_t index = 0;
  friend bool operator==(const ExpectedValue&, const ExpectedValue&) = default;
};

// The arguments of one call besides its buffers.
struct CallArgs {
  std::size_t count = 0;
  comm::DType dtype = comm::DType::f32;
  std::optional<comm::ReduceOp> reduce;  // set for the ops that reduce
  int root = 0;                          // the ops with a root
};

struct CollectiveEntry {
  std::string_view name;  // as the case's `op:` and other implementations name it
  bool reduces;           // takes `reduce:`
  bool has_root;          // takes `root:`; out of place, the root's send must stay unchanged
  // The size is split into one equal chunk per rank of the group, so that a size must divide
  // into that many chunks of whole elements; the others move whole buffers.
  bool chunked;
  bool send_is_chunk;  // each rank sends one chunk (all_gather)
  bool recv_is_chunk;  // each rank receives one chunk (reduce_scatter)
  // The threads backend copies an in-place call's input before the exchange, one more receive
  // buffer per rank (all_to_all).
  bool in_place_scratch;
  // nccl-tests' bus bandwidth factor on a group of n: busbw = algbw * factor compares with the
  // link bandwidth whatever the op and the group size.
  double (*bus_factor)(int n);
  // Data init: whether group rank g sends its generated input (the others' send buffers hold
  // the sentinel, so that a backend that reads them is caught).
  bool (*sends_input)(int g, int root);
  // Output element i of group rank g, for calls of `count` elements.
  ExpectedValue (*expected)(std::size_t i, std::size_t count, int g, int root);
  // The Communicator call.
  void (*call)(comm::Communicator& group, const void* send, void* recv, const CallArgs& args);

  CollectiveBuffers buffers(std::int64_t bytes, std::size_t element_size, int n) const;

  struct Pointers {
    std::byte* send;
    std::byte* recv;
  };
  // The pointers of an in-place call of group rank g whose out-of-place buffers are send and
  // recv, as NCCL defines in place: one buffer (the larger one), the chunk side at the rank's
  // chunk of it (communicator.hpp).
  Pointers in_place(std::byte* send, std::byte* recv, std::size_t chunk_bytes, int g) const;
};

// all_reduce, all_gather, reduce_scatter, all_to_all, broadcast.
std::span<const CollectiveEntry> collective_table();
// The entry named `name`; nullptr when there is none.
const CollectiveEntry* find_collective(std::string_view name);
// The names of the entries that `pick` selects, in table order, as a list in a sentence:
// "a", "a and b" or "a, b and c" (`last` is " and " or " or ").
std::string collective_names(bool (*pick)(const CollectiveEntry&), std::string_view last);

}  // namespace meshgate::runner

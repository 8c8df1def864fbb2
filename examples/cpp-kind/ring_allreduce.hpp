#pragma once
// The kernel under test: a ring all-reduce (sum of float32) over meshgate's Communicator, as a
// library of this project would have it. It knows nothing of meshgate's runner; the case kind in
// ring_allreduce_kind.cpp is what tests and times it.
#include <cstddef>
#include <vector>

#include "comm/communicator.hpp"

namespace ring {

// Sums `count` floats over every rank of `comm`, in place: a reduce-scatter of size - 1 ring
// steps, then an all-gather of size - 1 ring steps, each rank sending one chunk to the next rank
// and receiving one from the previous rank per step. Host backends only (threads, mpi): the
// data and the workspace are host memory.
class RingAllReduce {
 public:
  RingAllReduce(std::size_t count, int ranks);

  // Collective: every rank of `comm` (of `ranks` ranks) calls it with its own `data`.
  void run(meshgate::comm::Communicator& comm, float* data);

  // The steps of one call (2 x (ranks - 1)).
  int steps() const { return 2 * (ranks_ - 1); }

 private:
  // The part of `data` that chunk `chunk` covers.
  std::size_t chunk_begin(int chunk) const;
  std::size_t chunk_size(int chunk) const;
  // One ring step: sends chunk `send_chunk` of `data` to the next rank and returns the chunk
  // the previous rank sent (its chunk `send_chunk` - 1), in the receive workspace.
  const float* exchange(meshgate::comm::Communicator& comm, const float* data, int send_chunk);

  std::size_t count_;
  int ranks_;
  std::size_t block_;  // the largest chunk: every rank's part of one exchange
  std::vector<float> send_;
  std::vector<float> receive_;
};

}  // namespace ring

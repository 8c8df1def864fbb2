#include "ring_allreduce.hpp"

#include <algorithm>
#include <cstring>

namespace ring {

using meshgate::comm::Communicator;
using meshgate::comm::DType;

RingAllReduce::RingAllReduce(std::size_t count, int ranks)
    : count_(count),
      ranks_(ranks),
      block_((count + static_cast<std::size_t>(ranks) - 1) / static_cast<std::size_t>(ranks)),
      send_(block_ * static_cast<std::size_t>(ranks), 0.0f),
      receive_(block_ * static_cast<std::size_t>(ranks), 0.0f) {}

std::size_t RingAllReduce::chunk_begin(int chunk) const {
  return std::min(count_, block_ * static_cast<std::size_t>(chunk));
}

std::size_t RingAllReduce::chunk_size(int chunk) const {
  return std::min(count_, chunk_begin(chunk) + block_) - chunk_begin(chunk);
}

// The Communicator offers collectives only. A step to the next rank is an all_to_all in which
// each rank fills only the block that goes to its successor; it receives its predecessor's
// chunk in the block of that rank.
const float* RingAllReduce::exchange(Communicator& comm, const float* data, int send_chunk) {
  const int next = (comm.rank() + 1) % ranks_;
  const int previous = (comm.rank() + ranks_ - 1) % ranks_;
  std::copy_n(data + chunk_begin(send_chunk), chunk_size(send_chunk),
              send_.data() + block_ * static_cast<std::size_t>(next));
  comm.all_to_all(send_.data(), receive_.data(), block_, DType::f32);
  return receive_.data() + block_ * static_cast<std::size_t>(previous);
}

void RingAllReduce::run(Communicator& comm, float* data) {
  const int rank = comm.rank();
  // Reduce-scatter: after step s, chunk (rank - s - 1) holds the sum over s + 2 ranks; after
  // the last step, this rank holds the whole sum of chunk (rank + 1).
  for (int step = 0; step < ranks_ - 1; ++step) {
    const int send_chunk = (rank - step + ranks_) % ranks_;
    const int receive_chunk = (rank - step - 1 + 2 * ranks_) % ranks_;
    const float* received = exchange(comm, data, send_chunk);
    float* into = data + chunk_begin(receive_chunk);
    for (std::size_t i = 0; i < chunk_size(receive_chunk); ++i) into[i] += received[i];
  }
  // All-gather: every rank passes on the finished chunk it received last.
  for (int step = 0; step < ranks_ - 1; ++step) {
    const int send_chunk = (rank + 1 - step + ranks_) % ranks_;
    const int receive_chunk = (rank - step + ranks_) % ranks_;
    const float* received = exchange(comm, data, send_chunk);
    std::memcpy(data + chunk_begin(receive_chunk), received,
                chunk_size(receive_chunk) * sizeof(float));
  }
}

}  // namespace ring

#pragma once
// Exact verification of one collective on one rank, as nccl-tests does it: every input element
// is a small integer generated from (seed, rank, index), chosen so that every partial result of
// the reduction is exactly representable in the dtype (sums of at most 8 values in [-15, 15],
// products of values in {-2, -1, 1, 2}); the expected output is computed independently on the
// host and compared bit for bit. Shared by the tests of every backend.
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/communicator.hpp"

namespace meshgate::comm::testing {

enum class Collective { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast };
std::string_view to_string(Collective c);
bool is_reduction(Collective c);

struct CheckSpec {
  Collective collective = Collective::all_reduce;
  DType dtype = DType::f32;
  ReduceOp reduce = ReduceOp::sum;
  std::size_t count = 0;  // per rank, as in the Communicator interface
  bool in_place = false;
  std::uint64_t seed = 1;
  int root = 0;  // broadcast
};

std::string describe(const CheckSpec& spec);

// The input value of element `index` on `rank` (before conversion to the dtype).
std::int64_t input_value(std::uint64_t seed, int rank, std::size_t index, DType dtype,
                         ReduceOp reduce);

// Runs spec's collective on `comm` with generated inputs in buffers from comm.allocate() and
// returns how many output elements of this rank differ from the expected values, plus, out of
// place, how many elements of its send buffer the call changed. With `first_wrong`, the first
// of them is described there: its index, and the expected and actual bytes (an untouched
// output still holds the 0x7f poison). A broadcast's non-root ranks send inputs of another
// seed, so a backend that reads them, or never writes a recv (the root's included), is caught.
std::size_t run_and_count_wrong(Communicator& comm, const CheckSpec& spec,
                                std::string* first_wrong = nullptr);

}  // namespace meshgate::comm::testing

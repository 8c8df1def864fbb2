#pragma once
// One Communicator interface over every backend (threads, mpi, nccl), as c10d's Backend: a
// rank in a group of ranks, the collectives on typed buffers, and split into sub-groups.
// Buffers live in the backend's memory space (host for threads and mpi, device for nccl):
// allocate them with allocate() and move data with copy_to/copy_from.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/reduce_op.hpp"

namespace meshgate::comm {

enum class DType { f32, f64, f16, bf16, i32, i64, i8, u8 };
using meshgate::ReduceOp;

std::size_t element_size(DType d);
std::string_view to_string(DType d);  // "float32", "float64", "float16", "bfloat16", "int32", ...
DType parse_dtype(std::string_view text);  // Error(value) naming the known dtypes
bool is_floating(DType d);                 // float32, float64, float16, bfloat16

// Where `rank` sits in `groups` (split's argument): the index of its group and its position
// there, or {-1, -1} when no group holds it. Error(value) unless the groups are non-empty and
// disjoint and hold only ranks in [0, size).
struct GroupPosition {
  int group = -1;
  int position = -1;
};
GroupPosition locate_rank(const std::vector<std::vector<int>>& groups, int size, int rank);

// A call the backend cannot carry out: an op or dtype it lacks, a size past its limits (MPI's
// int counts), or a call of its own that failed (an MPI or NCCL status). Not a rejection of a
// case's input by the code under test, so the runner reports it as an error of the rank that
// raised it, never as a wrong answer.
class BackendError : public Error {
 public:
  BackendError(ErrorKind kind, std::string_view message) : Error(kind, message) {}
};

// The error a backend raises for a combination it does not support (RuntimeError, as c10d's
// TORCH_CHECK): "backend 'threads' does not support all_reduce(avg) for int32: <reason>".
BackendError unsupported(std::string_view backend, std::string_view collective, DType dtype,
                         std::string_view reason);
BackendError unsupported(std::string_view backend, std::string_view collective, ReduceOp op,
                         DType dtype, std::string_view reason);

// A collective that cannot complete for a reason that is not its input: its ranks called it
// differently (counts, dtypes, ops or roots that disagree, which on a real backend hang or read
// past a buffer), or its world was aborted while they waited. A RuntimeError as c10d raises;
// unlike the Error of a rejected input, it is a fault of the calling code, which the runner
// reports as an error of the rank.
class CollectiveFault : public Error {
 public:
  explicit CollectiveFault(std::string_view message) : Error(ErrorKind::runtime, message) {}
};

// Element counts are per rank, as in NCCL:
//   all_reduce:     send/recv hold `count` elements
//   all_gather:     send holds `count`, recv holds size() * count (rank r's block at r * count)
//   reduce_scatter: send holds size() * count, recv holds `count` (rank r gets block r)
//   all_to_all:     send and recv hold size() * count; block j of rank i goes to block i of rank j
//   broadcast:      send and recv hold `count`; the root's send lands in every rank's recv,
//                   the root's own included; send is read on the root only (ncclBroadcast)
// In place: send == recv for all_reduce / all_to_all / broadcast; for all_gather
// send == recv + rank*count; for reduce_scatter recv == send + rank*count (NCCL's in-place
// conventions). Out of place, no collective writes its send buffer.
// Every call is collective over all ranks of the communicator and blocks until this rank's
// part is complete (for nccl: until the stream work is enqueued; synchronize() waits).
// An unsupported (op, dtype, reduce) combination throws BackendError naming the backend,
// the op and the dtype, e.g. "backend 'mpi' does not support all_reduce(product) for bfloat16".
// A backend overrides the collectives it has: as in c10d's Backend, each collective (split
// included) defaults to a BackendError naming the backend and the collective, "backend 'mpi'
// does not support all_to_all", so a new collective does not touch every backend and fake.
// backend(), rank(), size() and the memory calls have no default.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual std::string_view backend() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                          ReduceOp op);
  virtual void all_gather(const void* send, void* recv, std::size_t count, DType dtype);
  virtual void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                              ReduceOp op);
  virtual void all_to_all(const void* send, void* recv, std::size_t count, DType dtype);
  virtual void broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root);
  virtual void barrier();

  // Collective over all ranks of this communicator: `groups` lists disjoint groups of ranks
  // (of this communicator). Returns this rank's communicator for the group that contains it
  // (its rank there = its position in the group), or nullptr when no group contains it.
  virtual std::unique_ptr<Communicator> split(const std::vector<std::vector<int>>& groups);

  // Memory of the backend's space (host memory for threads/mpi, device memory for nccl).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual void copy_from_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes) = 0;
  // Waits until every collective this rank issued has completed (a no-op for host backends).
  virtual void synchronize() = 0;

 protected:
  // The default of a collective this backend lacks: BackendError(runtime) "backend '<backend()>'
  // does not support <collective>".
  [[noreturn]] void lacks(std::string_view collective) const;
};

}  // namespace meshgate::comm

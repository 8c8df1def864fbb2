// The MPI backend: each collective is one MPI call on host buffers. MPI has no avg, so avg is
// MPI_SUM followed by a local division; float16 and bfloat16 have no MPI arithmetic, so they
// travel as 2-byte integers and reduce through user-defined ops (MPI_Op_create) that combine
// in float and round after every step, like the threads backend.
#include <mpi.h>

#include <array>
#include <climits>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "comm/host_reduce.hpp"
#include "comm/mpi_world.hpp"
#include "core/error.hpp"

namespace meshgate::comm {
namespace {

constexpr std::string_view kBackend = "mpi";
constexpr std::size_t kAlignment = 64;

// Every MPI status goes through here: the call, file:line and MPI's own error string.
void check_mpi(int status, const char* call, const char* file, int line) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw BackendError(ErrorKind::runtime, std::string(call) + " failed at " + file + ":" +
                                             std::to_string(line) + ": " +
                                             std::string(text, length));
}
#define MESHGATE_MPI_CHECK(call) check_mpi((call), #call, __FILE__, __LINE__)

// The user-defined ops for float16/bfloat16, one per (format, op). MPI calls them with
// inout = in op inout; reduce_sources allows its destination to alias a source.
template <DType D, ReduceOp Op>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const void* srcs[] = {in, inout};
  reduce_sources(srcs, inout, static_cast<std::size_t>(*len), D, Op);
}

struct HalfOps {
  std::mutex mutex;
  bool created = false;
  // [format: 0 float16, 1 bfloat16][op: sum, max, min, product]
  std::array<std::array<MPI_Op, 4>, 2> ops{};
};
HalfOps& half_ops() {
  static HalfOps ops;
  return ops;
}

int half_op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return 0;
    case ReduceOp::max:
      return 1;
    case ReduceOp::min:
      return 2;
    case ReduceOp::product:
      return 3;
  }
  return 0;
}

MPI_Op half_mpi_op(DType dtype, ReduceOp op) {
  HalfOps& h = half_ops();
  std::lock_guard lock(h.mutex);
  if (!h.created) {
    using Fn = MPI_User_function*;
    const std::array<std::array<Fn, 4>, 2> functions = {{
        {half_op<DType::f16, ReduceOp::sum>, half_op<DType::f16, ReduceOp::max>,
         half_op<DType::f16, ReduceOp::min>, half_op<DType::f16, ReduceOp::product>},
        {half_op<DType::bf16, ReduceOp::sum>, half_op<DType::bf16, ReduceOp::max>,
         half_op<DType::bf16, ReduceOp::min>, half_op<DType::bf16, ReduceOp::product>},
    }};
    for (std::size_t f = 0; f < 2; ++f) {
      for (std::size_t o = 0; o < 4; ++o) {
        MESHGATE_MPI_CHECK(MPI_Op_create(functions[f][o], /*commute=*/1, &h.ops[f][o]));
      }
    }
    h.created = true;
  }
  return h.ops[dtype == DType::f16 ? 0 : 1][static_cast<std::size_t>(half_op_index(op))];
}

void free_half_ops() {
  HalfOps& h = half_ops();
  std::lock_guard lock(h.mutex);
  if (!h.created) return;
  for (auto& row : h.ops) {
    for (MPI_Op& op : row) MPI_Op_free(&op);
  }
  h.created = false;
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16:
      return MPI_UINT16_T;  // only moved, or reduced by the user-defined ops
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::i8:
      return MPI_INT8_T;
    case DType::u8:
      return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  if (dtype == DType::f16 || dtype == DType::bf16) return half_mpi_op(dtype, op);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::product:
      return MPI_PROD;
  }
  return MPI_OP_NULL;
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    // Errors come back as statuses and become meshgate::Error instead of aborting the job.
    MESHGATE_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    MESHGATE_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MESHGATE_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }
  ~MpiCommunicator() override {
    if (!mpi_finalized()) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  std::string_view backend() const override { return kBackend; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                  ReduceOp op) override {
    check_reduce("all_reduce", op, dtype);
    const int n = mpi_count("all_reduce", count);
    MESHGATE_MPI_CHECK(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, n, mpi_type(dtype),
                                     mpi_op(dtype, op), comm_));
    if (op == ReduceOp::avg) divide_elements(recv, count, dtype, size_);
  }

  void all_gather(const void* send, void* recv, std::size_t count, DType dtype) override {
    const int n = mpi_count("all_gather", count * static_cast<std::size_t>(size_));
    const std::size_t block = count * element_size(dtype);
    const bool in_place = send == static_cast<std::byte*>(recv) + rank_ * block;
    MESHGATE_MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send, n / size_, mpi_type(dtype),
                                     recv, n / size_, mpi_type(dtype), comm_));
  }

  void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                      ReduceOp op) override {
    check_reduce("reduce_scatter", op, dtype);
    mpi_count("reduce_scatter", count * static_cast<std::size_t>(size_));
    const std::size_t block = count * element_size(dtype);
    // MPI's in-place form leaves the result at the start of the buffer, not at this rank's
    // block (NCCL's convention): reduce into a temporary block and copy it there.
    const bool in_place = recv == static_cast<const std::byte*>(send) + rank_ * block;
    std::vector<std::byte> temporary(in_place ? block : 0);
    void* out = in_place ? temporary.data() : recv;
    MESHGATE_MPI_CHECK(MPI_Reduce_scatter_block(send, out, static_cast<int>(count), mpi_type(dtype),
                                                mpi_op(dtype, op), comm_));
    if (in_place && block) std::memcpy(recv, out, block);
    if (op == ReduceOp::avg) divide_elements(recv, count, dtype, size_);
  }

  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype) override {
    mpi_count("all_to_all", count * static_cast<std::size_t>(size_));
    const int n = static_cast<int>(count);
    MESHGATE_MPI_CHECK(MPI_Alltoall(send == recv ? MPI_IN_PLACE : send, n, mpi_type(dtype), recv, n,
                                    mpi_type(dtype), comm_));
  }

  void broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root) override {
    if (root < 0 || root >= size_) {
      throw Error(ErrorKind::value, "broadcast: root " + std::to_string(root) +
                                        " is not a rank of this group of " + std::to_string(size_) +
                                        " ranks");
    }
    const int n = mpi_count("broadcast", count);
    // MPI_Bcast works in one buffer: out of place, the root first copies its send into recv.
    if (rank_ == root && send != recv && count > 0) {
      std::memcpy(recv, send, count * element_size(dtype));
    }
    MESHGATE_MPI_CHECK(MPI_Bcast(recv, n, mpi_type(dtype), root, comm_));
  }

  void barrier() override { MESHGATE_MPI_CHECK(MPI_Barrier(comm_)); }

  std::unique_ptr<Communicator> split(const std::vector<std::vector<int>>& groups) override {
    const GroupPosition where = locate_rank(groups, size_, rank_);
    const int color = where.group >= 0 ? where.group : MPI_UNDEFINED;
    MPI_Comm sub = MPI_COMM_NULL;
    MESHGATE_MPI_CHECK(MPI_Comm_split(comm_, color, where.position, &sub));
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(sub);
  }

  void* allocate(std::size_t bytes) override {
    return ::operator new (std::max<std::size_t>(bytes, 1), std::align_val_t{kAlignment});
  }
  void deallocate(void* ptr) override {
    if (ptr) ::operator delete (ptr, std::align_val_t{kAlignment});
  }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}

 private:
  static void check_reduce(std::string_view collective, ReduceOp op, DType dtype) {
    if (op == ReduceOp::avg && !is_floating(dtype)) {
      throw unsupported(kBackend, collective, op, dtype,
                        "avg is defined for floating-point dtypes only; use sum and divide");
    }
  }

  // MPI counts are ints.
  static int mpi_count(std::string_view collective, std::size_t elements) {
    if (elements > static_cast<std::size_t>(INT_MAX)) {
      throw BackendError(ErrorKind::value, std::string(collective) + ": " +
                                               std::to_string(elements) +
                                               " elements exceed MPI's int count limit " +
                                               std::to_string(INT_MAX) + "; split the buffer");
    }
    return static_cast<int>(elements);
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MESHGATE_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) return;
  int provided = 0;
  MESHGATE_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
  owns_ = true;
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw Error(ErrorKind::runtime, "MPI provides thread level " + std::to_string(provided) +
                                        " but meshgate needs MPI_THREAD_SERIALIZED");
  }
}

MpiSession::~MpiSession() {
  if (!owns_ || mpi_finalized()) return;
  free_half_ops();
  MPI_Finalize();
}

std::unique_ptr<Communicator> mpi_world() {
  int initialized = 0;
  MESHGATE_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized || mpi_finalized()) {
    throw Error(ErrorKind::runtime, "mpi_world: MPI is not initialized; create a MpiSession first");
  }
  MPI_Comm world = MPI_COMM_NULL;
  MESHGATE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));
  return std::make_unique<MpiCommunicator>(world);
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string version(text, static_cast<std::size_t>(length));
  const auto end = version.find_first_of("\n,");
  return end == std::string::npos ? version : version.substr(0, end);
}

}  // namespace meshgate::comm

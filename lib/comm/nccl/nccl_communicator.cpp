// The NCCL backend: each collective is one NCCL call enqueued on the communicator's stream.
// Every CUDA and NCCL status goes through check_status, which adds the call, file:line and the
// library's own error string.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "comm/nccl_world.hpp"
#include "core/error.hpp"

namespace meshgate::comm {
namespace {

constexpr std::string_view kBackend = "nccl";

bool status_ok(cudaError_t s) {
  return s == cudaSuccess;
}
bool status_ok(ncclResult_t s) {
  return s == ncclSuccess;
}
std::string status_text(cudaError_t s) {
  return std::string(cudaGetErrorName(s)) + ": " + cudaGetErrorString(s);
}
std::string status_text(ncclResult_t s) {
  return ncclGetErrorString(s);
}

template <typename Status>
void check_status(Status status, const char* call, const char* file, int line) {
  if (status_ok(status)) return;
  throw BackendError(ErrorKind::runtime, std::string(call) + " failed at " + file + ":" +
                                             std::to_string(line) + ": " + status_text(status));
}
#define MESHGATE_NCCL_CHECK(call) check_status((call), #call, __FILE__, __LINE__)

// RAII owners of the NCCL communicator, the stream and device memory. Their destructors
// cannot throw, so they release and ignore the status: the object is gone either way.
struct CommDestroy {
  void operator()(ncclComm_t comm) const { ncclCommDestroy(comm); }
};
using CommHandle = std::unique_ptr<std::remove_pointer_t<ncclComm_t>, CommDestroy>;

struct StreamDestroy {
  void operator()(cudaStream_t stream) const { cudaStreamDestroy(stream); }
};
using StreamHandle = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDestroy>;

struct DeviceFree {
  void operator()(void* ptr) const { cudaFree(ptr); }
};
using DeviceBuffer = std::unique_ptr<void, DeviceFree>;

DeviceBuffer device_alloc(std::size_t bytes) {
  void* ptr = nullptr;
  MESHGATE_NCCL_CHECK(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes));
  return DeviceBuffer(ptr);
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::i8:
      return ncclInt8;
    case DType::u8:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
    case ReduceOp::product:
      return ncclProd;
  }
  return ncclSum;
}

}  // namespace

namespace detail {

// How long synchronize() waits for a stream that makes no progress before it aborts the
// communicator: MESHGATE_NCCL_TIMEOUT_S, default 300 s.
double nccl_timeout_s() {
  const char* text = std::getenv("MESHGATE_NCCL_TIMEOUT_S");
  if (text == nullptr) return 300.0;
  const double v = std::atof(text);
  return v > 0 ? v : 300.0;
}

class NcclCommunicator final : public Communicator {
 public:
  // `parent_stream`, for a communicator split from another, orders this one's stream after
  // the work already enqueued on the parent's (buffers a collective of the child reads).
  NcclCommunicator(CommHandle comm, int device, cudaStream_t parent_stream = nullptr)
      : comm_(std::move(comm)), device_(device) {
    select_device();
    MESHGATE_NCCL_CHECK(ncclCommUserRank(comm_.get(), &rank_));
    MESHGATE_NCCL_CHECK(ncclCommCount(comm_.get(), &size_));
    cudaStream_t stream = nullptr;
    MESHGATE_NCCL_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    stream_.reset(stream);
    if (parent_stream != nullptr) {
      cudaEvent_t parent_done = nullptr;
      MESHGATE_NCCL_CHECK(cudaEventCreateWithFlags(&parent_done, cudaEventDisableTiming));
      const cudaError_t recorded = cudaEventRecord(parent_done, parent_stream);
      const cudaError_t waited =
          recorded == cudaSuccess ? cudaStreamWaitEvent(stream, parent_done, 0) : recorded;
      cudaEventDestroy(parent_done);  // released once the wait is satisfied
      MESHGATE_NCCL_CHECK(waited);
    }
    barrier_word_ = device_alloc(sizeof(int));
  }

  ~NcclCommunicator() override {
    // An aborted communicator is gone already; destroying it again is undefined.
    if (aborted_) (void)comm_.release();
  }

  std::string_view backend() const override { return kBackend; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  cudaStream_t stream() const { return stream_.get(); }
  void select_device() const { MESHGATE_NCCL_CHECK(cudaSetDevice(device_)); }

  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                  ReduceOp op) override {
    check_reduce("all_reduce", op, dtype);
    select_device();
    MESHGATE_NCCL_CHECK(
        ncclAllReduce(send, recv, count, nccl_type(dtype), reduction(op), comm_.get(), stream()));
  }

  void all_gather(const void* send, void* recv, std::size_t count, DType dtype) override {
    select_device();
    MESHGATE_NCCL_CHECK(ncclAllGather(send, recv, count, nccl_type(dtype), comm_.get(), stream()));
  }

  void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                      ReduceOp op) override {
    check_reduce("reduce_scatter", op, dtype);
    select_device();
    MESHGATE_NCCL_CHECK(ncclReduceScatter(send, recv, count, nccl_type(dtype), reduction(op),
                                          comm_.get(), stream()));
  }

  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype) override {
    select_device();
    const std::size_t bytes = count * element_size(dtype) * static_cast<std::size_t>(size_);
    if (send != recv) {
      MESHGATE_NCCL_CHECK(ncclAlltoAll(send, recv, count, nccl_type(dtype), comm_.get(), stream()));
      return;
    }
    // NCCL does not define in-place all-to-all: send from a stream-ordered copy.
    void* copy = nullptr;
    MESHGATE_NCCL_CHECK(cudaMallocAsync(&copy, bytes == 0 ? 1 : bytes, stream()));
    MESHGATE_NCCL_CHECK(cudaMemcpyAsync(copy, send, bytes, cudaMemcpyDeviceToDevice, stream()));
    const ncclResult_t status =
        ncclAlltoAll(copy, recv, count, nccl_type(dtype), comm_.get(), stream());
    MESHGATE_NCCL_CHECK(cudaFreeAsync(copy, stream()));
    MESHGATE_NCCL_CHECK(status);
  }

  void broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root) override {
    if (root < 0 || root >= size_) {
      throw Error(ErrorKind::value, "broadcast: root " + std::to_string(root) +
                                        " is not a rank of this group of " + std::to_string(size_) +
                                        " ranks");
    }
    select_device();
    MESHGATE_NCCL_CHECK(
        ncclBroadcast(send, recv, count, nccl_type(dtype), root, comm_.get(), stream()));
  }

  // NCCL has no barrier: an all-reduce of one word, then wait for it.
  void barrier() override {
    select_device();
    MESHGATE_NCCL_CHECK(ncclAllReduce(barrier_word_.get(), barrier_word_.get(), 1, ncclInt32,
                                      ncclSum, comm_.get(), stream()));
    synchronize();
  }

  std::unique_ptr<Communicator> split(const std::vector<std::vector<int>>& groups) override {
    const GroupPosition where = locate_rank(groups, size_, rank_);
    select_device();
    ncclComm_t sub = nullptr;
    MESHGATE_NCCL_CHECK(ncclCommSplit(comm_.get(),
                                      where.group >= 0 ? where.group : NCCL_SPLIT_NOCOLOR,
                                      where.position, &sub, nullptr));
    if (sub == nullptr) return nullptr;
    return std::make_unique<NcclCommunicator>(CommHandle(sub), device_, stream());
  }

  void* allocate(std::size_t bytes) override {
    select_device();
    return device_alloc(bytes).release();
  }
  void deallocate(void* ptr) override {
    if (ptr) cudaFree(ptr);
  }
  // Stream-ordered with the collectives, then waited for: the host buffer is free to reuse.
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    select_device();
    MESHGATE_NCCL_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
    synchronize();
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    select_device();
    MESHGATE_NCCL_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
    synchronize();
  }
  // Waits for the stream by polling, so that a dead or failed peer becomes an error instead of
  // a hang: NCCL's asynchronous error, or no progress within MESHGATE_NCCL_TIMEOUT_S, aborts
  // the communicator (ncclCommAbort) and throws naming this rank and the reason.
  void synchronize() override {
    if (aborted_) throw aborted_error("it was aborted earlier");
    const auto start = std::chrono::steady_clock::now();
    const double timeout = nccl_timeout_s();
    for (;;) {
      const cudaError_t state = cudaStreamQuery(stream());
      if (state == cudaSuccess) return;
      if (state != cudaErrorNotReady) MESHGATE_NCCL_CHECK(state);
      ncclResult_t async = ncclSuccess;
      MESHGATE_NCCL_CHECK(ncclCommGetAsyncError(comm_.get(), &async));
      if (async != ncclSuccess && async != ncclInProgress)
        abort_and_throw(std::string("NCCL reported an asynchronous error: ") +
                        ncclGetErrorString(async));
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout)
        abort_and_throw("no progress for " + std::to_string(static_cast<int>(timeout)) +
                        " s (MESHGATE_NCCL_TIMEOUT_S): a peer rank is dead or stuck");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  // The NCCL operation for `op` on this communicator. On one rank the average is the sum, and
  // NCCL's own one-rank average leaves a tail of the output unwritten: its one-rank kernel
  // (src/device/onerank.cu, NCCL 2.28) gives each of min(32, bytes / 16 KiB) blocks
  // floor(count / blocks) elements rounded up to 16-byte packs, which can stop short of count.
  // On an H100 with NCCL 2.28.9 that is exactly what the exactness test saw: out of place, one
  // element wrong at count 1048577 in every float dtype and at 4099 in float64 only.
  ncclRedOp_t reduction(ReduceOp op) const {
    return op == ReduceOp::avg && size_ == 1 ? ncclSum : nccl_op(op);
  }

  static void check_reduce(std::string_view collective, ReduceOp op, DType dtype) {
    // NCCL's own integer avg truncates (sum, then integer division); meshgate keeps avg to
    // floating-point dtypes so that every backend gives the same results for the same case.
    if (op == ReduceOp::avg && !is_floating(dtype)) {
      throw unsupported(kBackend, collective, op, dtype,
                        "avg is defined for floating-point dtypes only; use sum and divide");
    }
  }

  Error aborted_error(const std::string& why) const {
    return Error(ErrorKind::runtime, "nccl communicator of rank " + std::to_string(rank_) + " of " +
                                         std::to_string(size_) + " on device " +
                                         std::to_string(device_) + " aborted: " + why);
  }

  [[noreturn]] void abort_and_throw(const std::string& why) {
    ncclCommAbort(comm_.get());
    aborted_ = true;
    throw aborted_error(why);
  }

  // Declared first, destroyed last: the stream and buffers go before the communicator.
  CommHandle comm_;
  bool aborted_ = false;
  int device_;
  int rank_ = 0;
  int size_ = 1;
  StreamHandle stream_;
  DeviceBuffer barrier_word_;
};

}  // namespace detail

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status for later calls
    return 0;
  }
  return count;
}

namespace {
// CUDA encodes versions as major * 1000 + minor * 10.
std::string cuda_version_text(int code) {
  return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 10);
}
}  // namespace

std::string cuda_runtime_version() {
  int code = 0;
  if (cudaRuntimeGetVersion(&code) != cudaSuccess) return "";
  return cuda_version_text(code);
}

std::string cuda_driver_version() {
  int code = 0;
  if (cudaDriverGetVersion(&code) != cudaSuccess || code == 0) return "";
  return cuda_version_text(code);
}

std::vector<std::string> cuda_device_names() {
  std::vector<std::string> names;
  for (int i = 0; i < cuda_device_count(); ++i) {
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, i) == cudaSuccess) names.emplace_back(props.name);
  }
  return names;
}

std::string nccl_library_version() {
  int code = 0;
  MESHGATE_NCCL_CHECK(ncclGetVersion(&code));
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return std::to_string(code / 10000) + "." + std::to_string(code % 10000 / 100) + "." +
         std::to_string(code % 100);
}

std::optional<int> local_rank_from_environment() {
  // Open MPI, Slurm, MPICH/Intel MPI and torchrun, in that order.
  for (const char* name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"}) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') continue;
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (*end == '\0' && v >= 0) return static_cast<int>(v);
  }
  return std::nullopt;
}

int device_for_rank(std::optional<int> local_rank, int rank, int devices) {
  if (devices <= 0)
    throw Error(ErrorKind::runtime, "no CUDA device is visible to rank " + std::to_string(rank));
  // One visible device (CUDA_VISIBLE_DEVICES set per rank by the launcher): it is this rank's.
  if (devices == 1) return 0;
  if (!local_rank) return rank % devices;
  if (*local_rank >= devices)
    throw Error(ErrorKind::value, "rank " + std::to_string(rank) + " is local rank " +
                                      std::to_string(*local_rank) + " on its node, which has " +
                                      std::to_string(devices) +
                                      " visible GPUs: start at most one rank per GPU per node");
  return *local_rank;
}

std::unique_ptr<Communicator> nccl_world(Communicator& bootstrap, int device) {
  if (bootstrap.backend() == kBackend) {
    throw Error(ErrorKind::value,
                "nccl_world: the bootstrap must be a host-memory communicator (mpi or threads)");
  }
  const int devices = cuda_device_count();
  if (devices == 0) {
    throw Error(ErrorKind::runtime,
                "nccl_world: no CUDA device is visible; run on a GPU machine or use the "
                "threads or mpi backend");
  }
  if (device < 0)
    device = device_for_rank(local_rank_from_environment(), bootstrap.rank(), devices);
  if (device >= devices) {
    throw Error(ErrorKind::value, "nccl_world: device " + std::to_string(device) + " but only " +
                                      std::to_string(devices) + " are visible");
  }

  // Rank 0's id travels with a flag saying whether it could make one, so that a failure there
  // becomes an error on every rank instead of a hang.
  struct Packet {
    ncclUniqueId id;
    std::uint8_t ok;
  } packet{};
  std::string failure;
  if (bootstrap.rank() == 0) {
    try {
      MESHGATE_NCCL_CHECK(ncclGetUniqueId(&packet.id));
      packet.ok = 1;
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  bootstrap.broadcast(&packet, &packet, sizeof(packet), DType::u8, 0);
  if (!packet.ok) {
    throw Error(ErrorKind::runtime, "nccl_world: rank 0 could not create the NCCL unique id" +
                                        (failure.empty() ? std::string() : ": " + failure));
  }

  MESHGATE_NCCL_CHECK(cudaSetDevice(device));
  ncclComm_t comm = nullptr;
  MESHGATE_NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), packet.id, bootstrap.rank()));
  return std::make_unique<detail::NcclCommunicator>(CommHandle(comm), device);
}

struct EventTimer::Events {
  struct EventDestroy {
    void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
  };
  using EventHandle = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDestroy>;
  detail::NcclCommunicator* comm = nullptr;
  EventHandle start;
  EventHandle stop;
};

EventTimer::EventTimer(Communicator& comm) : events_(std::make_unique<Events>()) {
  events_->comm = dynamic_cast<detail::NcclCommunicator*>(&comm);
  if (events_->comm == nullptr) {
    throw Error(ErrorKind::value, "EventTimer times an nccl communicator's stream, not a '" +
                                      std::string(comm.backend()) + "' communicator");
  }
  events_->comm->select_device();
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  MESHGATE_NCCL_CHECK(cudaEventCreate(&start));
  events_->start.reset(start);
  MESHGATE_NCCL_CHECK(cudaEventCreate(&stop));
  events_->stop.reset(stop);
}

EventTimer::~EventTimer() = default;

void EventTimer::start() {
  MESHGATE_NCCL_CHECK(cudaEventRecord(events_->start.get(), events_->comm->stream()));
}

void EventTimer::stop() {
  MESHGATE_NCCL_CHECK(cudaEventRecord(events_->stop.get(), events_->comm->stream()));
}

double EventTimer::seconds() {
  MESHGATE_NCCL_CHECK(cudaEventSynchronize(events_->stop.get()));
  float milliseconds = 0;
  MESHGATE_NCCL_CHECK(
      cudaEventElapsedTime(&milliseconds, events_->start.get(), events_->stop.get()));
  return static_cast<double>(milliseconds) * 1e-3;
}

}  // namespace meshgate::comm

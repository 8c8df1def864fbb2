#include "redistribute/redistribute.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "redistribute/detail.hpp"

namespace meshgate {
namespace {

using redistribute_detail::copy_bytes;
using redistribute_detail::product;
using redistribute_detail::shape_string;

// A buffer in the communicator's memory space (device memory for nccl), filled from and read
// back to host tensors, so the executor works on every backend.
class CommBuffer {
 public:
  CommBuffer(comm::Communicator& c, std::size_t bytes)
      : comm_(&c), ptr_(c.allocate(bytes)) {}
  ~CommBuffer() { comm_->deallocate(ptr_); }
  CommBuffer(const CommBuffer&) = delete;
  CommBuffer& operator=(const CommBuffer&) = delete;
  void* get() const { return ptr_; }
  void upload(const HostTensor& t) { comm_->copy_from_host(ptr_, t.data.data(), t.bytes()); }
  void download(HostTensor& t) {
    comm_->synchronize();
    comm_->copy_to_host(t.data.data(), ptr_, t.bytes());
  }

 private:
  comm::Communicator* comm_;
  void* ptr_;
};

// `t` padded with zeros along `dim` to `size` (DTensor's pad_tensor): a copy either way.
HostTensor pad_to(const HostTensor& t, std::int64_t dim, std::int64_t size) {
  Shape shape = t.shape;
  shape[static_cast<std::size_t>(dim)] = size;
  HostTensor out = HostTensor::zeros(shape, t.dtype);
  const Shape zero(t.shape.size(), 0);
  copy_box(t, zero, out, zero, t.shape);
  return out;
}

// ---- one function per step kind: `x` has the step's input shape, `g` is the step's group of
// s.group_size > 1 ranks.

// P(op) -> R.
HostTensor all_reduce_step(const TransformStep& s, HostTensor x, CountingCommunicator& g) {
  CommBuffer buf(g, x.bytes());
  buf.upload(x);
  g.annotate(-1, -1, s.reduce_op);
  g.all_reduce(buf.get(), buf.get(), static_cast<std::size_t>(x.numel()), x.dtype, s.reduce_op);
  buf.download(x);
  if (s.avg_scale > 1) divide(x, s.avg_scale);
  return x;
}

// P(op) -> S(d): pad the scattered dim to n equal pieces, lay the pieces out as n contiguous
// blocks, reduce-scatter, then trim this rank's piece to its torch.chunk length.
HostTensor reduce_scatter_step(const TransformStep& s, const HostTensor& x,
                               CountingCommunicator& g) {
  const std::int64_t n = s.group_size;
  const std::size_t es = x.element_size();
  const comm::DType dt = x.dtype;
  const auto d = static_cast<std::size_t>(s.dst_tensor_dim);
  const std::int64_t full = padded_chunk(x.shape[d], n);
  Shape block_shape = x.shape;
  block_shape[d] = full;
  const std::int64_t block = product(block_shape);
  HostTensor send = HostTensor::zeros({n * block}, dt);
  for (std::int64_t j = 0; j < n; ++j) {
    const ChunkRange r = chunk_range(x.shape[d], n, j);
    if (r.length == 0) continue;
    HostTensor piece = pad_to(narrow(x, static_cast<std::int64_t>(d), r.offset, r.length),
                              static_cast<std::int64_t>(d), full);
    copy_bytes(send.data.data() + static_cast<std::size_t>(j * block) * es, piece.data.data(),
               piece.bytes());
  }
  HostTensor recv = HostTensor::zeros(block_shape, dt);
  CommBuffer sb(g, send.bytes());
  CommBuffer rb(g, recv.bytes());
  sb.upload(send);
  g.annotate(-1, s.dst_tensor_dim, s.reduce_op);
  g.reduce_scatter(sb.get(), rb.get(), static_cast<std::size_t>(block), dt, s.reduce_op);
  rb.download(recv);
  const ChunkRange mine = chunk_range(x.shape[d], n, g.rank());
  HostTensor out = narrow(recv, static_cast<std::int64_t>(d), 0, mine.length);
  if (s.avg_scale > 1) divide(out, s.avg_scale);
  return out;
}

// S(d) -> R: pad to ceil(L/n), gather n blocks, lay them side by side along the dim, trim to L.
HostTensor all_gather_step(const TransformStep& s, const HostTensor& x, CountingCommunicator& g) {
  const std::int64_t n = s.group_size;
  const std::size_t es = x.element_size();
  const comm::DType dt = x.dtype;
  const std::size_t nd = x.shape.size();
  const auto d = static_cast<std::size_t>(s.src_tensor_dim);
  const std::int64_t logical = s.logical_shape[d];
  const std::int64_t full = padded_chunk(logical, n);
  HostTensor send = pad_to(x, static_cast<std::int64_t>(d), full);
  const std::int64_t block = send.numel();
  HostTensor recv = HostTensor::zeros({n * block}, dt);
  CommBuffer sb(g, send.bytes());
  CommBuffer rb(g, recv.bytes());
  sb.upload(send);
  g.annotate(s.src_tensor_dim, -1, ReduceOp::sum);
  g.all_gather(sb.get(), rb.get(), static_cast<std::size_t>(block), dt);
  rb.download(recv);
  Shape out_shape = x.shape;
  out_shape[d] = logical;
  HostTensor out = HostTensor::zeros(out_shape, dt);
  HostTensor piece = HostTensor::zeros(send.shape, dt);
  const Shape zero(nd, 0);
  for (std::int64_t j = 0; j < n; ++j) {
    const std::int64_t rows = std::min(full, logical - j * full);
    if (rows <= 0) break;
    copy_bytes(piece.data.data(), recv.data.data() + static_cast<std::size_t>(j * block) * es,
               piece.bytes());
    Shape extent = piece.shape;
    extent[d] = rows;
    Shape at(nd, 0);
    at[d] = j * full;
    copy_box(piece, zero, out, at, extent);
  }
  return out;
}

// S(a) -> S(b), as shard_dim_alltoall: pad a to ceil(La/n) and b to ceil(Lb/n)*n; block j holds
// piece j of b; rank i's block lands at piece i of a; trim a to La and b to this rank's piece.
HostTensor all_to_all_step(const TransformStep& s, const HostTensor& x, CountingCommunicator& g) {
  const std::int64_t n = s.group_size;
  const std::size_t es = x.element_size();
  const comm::DType dt = x.dtype;
  const std::size_t nd = x.shape.size();
  const auto a = static_cast<std::size_t>(s.src_tensor_dim);
  const auto b = static_cast<std::size_t>(s.dst_tensor_dim);
  const std::int64_t la = s.logical_shape[a];
  const std::int64_t fa = padded_chunk(la, n);
  const std::int64_t lb = x.shape[b];
  const std::int64_t fb = padded_chunk(lb, n);
  Shape block_shape = x.shape;
  block_shape[a] = fa;
  block_shape[b] = fb;
  const std::int64_t block = product(block_shape);
  HostTensor send = HostTensor::zeros({n * block}, dt);
  HostTensor piece = HostTensor::zeros(block_shape, dt);
  const Shape zero(nd, 0);
  for (std::int64_t j = 0; j < n; ++j) {
    std::fill(piece.data.begin(), piece.data.end(), std::byte{0});
    const ChunkRange r = chunk_range(lb, n, j);
    if (r.length > 0) {
      Shape from(nd, 0);
      from[b] = r.offset;
      Shape extent = x.shape;
      extent[b] = r.length;
      copy_box(x, from, piece, zero, extent);
    }
    copy_bytes(send.data.data() + static_cast<std::size_t>(j * block) * es, piece.data.data(),
               piece.bytes());
  }
  HostTensor recv = HostTensor::zeros({n * block}, dt);
  CommBuffer sb(g, send.bytes());
  CommBuffer rb(g, recv.bytes());
  sb.upload(send);
  g.annotate(s.src_tensor_dim, s.dst_tensor_dim, ReduceOp::sum);
  g.all_to_all(sb.get(), rb.get(), static_cast<std::size_t>(block), dt);
  rb.download(recv);
  const ChunkRange mine = chunk_range(lb, n, g.rank());
  Shape out_shape = x.shape;
  out_shape[a] = la;
  out_shape[b] = mine.length;
  HostTensor out = HostTensor::zeros(out_shape, dt);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t rows = std::min(fa, la - i * fa);
    if (rows <= 0) break;
    copy_bytes(piece.data.data(), recv.data.data() + static_cast<std::size_t>(i * block) * es,
               piece.bytes());
    Shape extent = block_shape;
    extent[a] = rows;
    extent[b] = mine.length;
    Shape at(nd, 0);
    at[a] = i * fa;
    copy_box(piece, zero, out, at, extent);
  }
  return out;
}

// R -> S(d): this rank's torch.chunk piece, indexed row-major by its coordinate over the step's
// mesh dims.
HostTensor local_chunk_step(const TransformStep& s, const HostTensor& x,
                            const std::vector<std::int64_t>& mesh_shape,
                            const std::vector<std::int64_t>& coordinate) {
  const auto d = static_cast<std::int64_t>(s.dst_tensor_dim);
  std::int64_t idx = 0;
  for (std::int64_t m : s.mesh_dims) {
    idx = idx * mesh_shape[static_cast<std::size_t>(m)] + coordinate[static_cast<std::size_t>(m)];
  }
  const ChunkRange r = chunk_range(x.shape[static_cast<std::size_t>(d)], s.group_size, idx);
  return narrow(x, d, r.offset, r.length);
}

// R -> P(op): divided by the group size for sum, unchanged otherwise.
HostTensor local_partial_step(const TransformStep& s, HostTensor x) {
  if (s.dst.is_partial() && s.dst.reduce_op() == ReduceOp::sum) divide(x, s.group_size);
  return x;
}

}  // namespace

Redistributor::Redistributor(comm::Communicator& world, DeviceMesh mesh)
    : world_(&world), mesh_(std::move(mesh)) {
  const auto coord = mesh_.coordinate(world.rank());
  if (!coord) {
    throw Error(ErrorKind::value, "rank " + std::to_string(world.rank()) + " is not in the mesh " +
                                      to_string(mesh_.layout()) +
                                      ": run the redistribution on the mesh's ranks");
  }
  coordinate_ = *coord;
}

HostTensor Redistributor::redistribute(const DTensorSpec& src, const DTensorSpec& dst,
                                       HostTensor local, const PlanOptions& options, CommLog* log) {
  create_groups(groups_of_all_coordinates(src, dst, std::span(&options, 1)));
  const std::shared_ptr<const Plan> plan = cached_plan_redistribute(src, dst, coordinate_, options);
  return run(plan->steps, std::move(local), log);
}

HostTensor Redistributor::run(std::span<const TransformStep> steps, HostTensor local,
                              CommLog* log) {
  for (const TransformStep& s : steps) local = step(s, std::move(local), log);
  return local;
}

HostTensor Redistributor::step(const TransformStep& s, HostTensor x, CommLog* log) {
  if (s.group_size <= 1) return x;  // test_one_chunk_mesh: a size-1 group issues nothing
  if (x.shape != s.input_shape) {
    throw Error(ErrorKind::value, "local tensor of shape " + shape_string(x.shape) + " but step " +
                                      to_string(s, mesh_) + " expects " +
                                      shape_string(s.input_shape) +
                                      ": plan with this rank's coordinate");
  }
  switch (s.kind) {
    case StepKind::all_reduce:
      return all_reduce_step(s, std::move(x), step_group(s, log));
    case StepKind::reduce_scatter:
      return reduce_scatter_step(s, x, step_group(s, log));
    case StepKind::all_gather:
      return all_gather_step(s, x, step_group(s, log));
    case StepKind::all_to_all:
      return all_to_all_step(s, x, step_group(s, log));
    case StepKind::local_chunk:
      return local_chunk_step(s, x, mesh_.shape(), coordinate_);
    case StepKind::local_partial:
      return local_partial_step(s, std::move(x));
  }
  return x;
}

}  // namespace meshgate

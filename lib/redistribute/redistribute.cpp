#include "redistribute/redistribute.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <utility>

#include "core/error.hpp"
#include "core/half_float.hpp"
#include "plan/comm_string.hpp"

namespace meshgate {
namespace {

// memcpy for buffers that may be empty (empty shards): memcpy's pointers must be valid even for
// zero bytes, and an empty vector's data() may be null.
void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

std::int64_t product(std::span<const std::int64_t> s) {
  std::int64_t p = 1;
  for (std::int64_t v : s) p *= v;
  return p;
}

std::string shape_string(std::span<const std::int64_t> s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

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

}  // namespace

// ---- HostTensor -------------------------------------------------------------------------

HostTensor HostTensor::zeros(Shape shape, comm::DType dtype) {
  for (std::int64_t s : shape) {
    if (s < 0) {
      throw Error(ErrorKind::value, "tensor shape " + shape_string(shape) + " has a negative size");
    }
  }
  HostTensor t;
  t.dtype = dtype;
  t.data.assign(static_cast<std::size_t>(product(shape)) * comm::element_size(dtype), std::byte{0});
  t.shape = std::move(shape);
  return t;
}

std::int64_t HostTensor::numel() const {
  return product(shape);
}

double HostTensor::get(std::int64_t i) const {
  const std::byte* p = data.data() + static_cast<std::size_t>(i) * element_size();
  switch (dtype) {
    case comm::DType::f32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case comm::DType::f64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case comm::DType::f16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return half_to_float(v);
    }
    case comm::DType::bf16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16_to_float(v);
    }
    case comm::DType::i32: {
      std::int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case comm::DType::i64: {
      std::int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case comm::DType::i8: {
      std::int8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
    case comm::DType::u8: {
      std::uint8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
  }
  return 0;
}

void HostTensor::set(std::int64_t i, double value) {
  std::byte* p = data.data() + static_cast<std::size_t>(i) * element_size();
  switch (dtype) {
    case comm::DType::f32: {
      const auto v = static_cast<float>(value);
      std::memcpy(p, &v, 4);
      break;
    }
    case comm::DType::f64:
      std::memcpy(p, &value, 8);
      break;
    case comm::DType::f16: {
      const std::uint16_t v = float_to_half(static_cast<float>(value));
      std::memcpy(p, &v, 2);
      break;
    }
    case comm::DType::bf16: {
      const std::uint16_t v = float_to_bf16(static_cast<float>(value));
      std::memcpy(p, &v, 2);
      break;
    }
    case comm::DType::i32: {
      const auto v = static_cast<std::int32_t>(value);
      std::memcpy(p, &v, 4);
      break;
    }
    case comm::DType::i64: {
      const auto v = static_cast<std::int64_t>(value);
      std::memcpy(p, &v, 8);
      break;
    }
    case comm::DType::i8: {
      const auto v = static_cast<std::int8_t>(value);
      std::memcpy(p, &v, 1);
      break;
    }
    case comm::DType::u8: {
      const auto v = static_cast<std::uint8_t>(value);
      std::memcpy(p, &v, 1);
      break;
    }
  }
}

void copy_box(const HostTensor& src, std::span<const std::int64_t> src_offset, HostTensor& dst,
              std::span<const std::int64_t> dst_offset, std::span<const std::int64_t> extent) {
  const std::size_t nd = src.shape.size();
  if (dst.shape.size() != nd || src_offset.size() != nd || dst_offset.size() != nd ||
      extent.size() != nd || src.dtype != dst.dtype) {
    throw Error(ErrorKind::value,
                "copy_box: tensors, offsets and extent need the same rank and dtype");
  }
  for (std::size_t d = 0; d < nd; ++d) {
    if (extent[d] == 0) return;
    if (extent[d] < 0 || src_offset[d] < 0 || dst_offset[d] < 0 ||
        src_offset[d] + extent[d] > src.shape[d] || dst_offset[d] + extent[d] > dst.shape[d]) {
      throw Error(ErrorKind::value, "copy_box: box " + shape_string(extent) + " at " +
                                        shape_string(src_offset) + " -> " +
                                        shape_string(dst_offset) + " leaves " +
                                        shape_string(src.shape) + " or " + shape_string(dst.shape));
    }
  }
  const auto es = static_cast<std::int64_t>(src.element_size());
  if (nd == 0) {
    std::memcpy(dst.data.data(), src.data.data(), static_cast<std::size_t>(es));
    return;
  }
  // Row-major strides in bytes; the innermost dim is one contiguous memcpy per row.
  std::vector<std::int64_t> ss(nd), ds(nd);
  ss[nd - 1] = es;
  ds[nd - 1] = es;
  for (std::size_t d = nd - 1; d-- > 0;) {
    ss[d] = ss[d + 1] * src.shape[d + 1];
    ds[d] = ds[d + 1] * dst.shape[d + 1];
  }
  std::int64_t sbase = 0, dbase = 0;
  for (std::size_t d = 0; d < nd; ++d) {
    sbase += src_offset[d] * ss[d];
    dbase += dst_offset[d] * ds[d];
  }
  const auto row = static_cast<std::size_t>(extent[nd - 1] * es);
  std::vector<std::int64_t> idx(nd, 0);
  const std::byte* s = src.data.data();
  std::byte* t = dst.data.data();
  while (true) {
    std::int64_t so = sbase, dof = dbase;
    for (std::size_t d = 0; d + 1 < nd; ++d) {
      so += idx[d] * ss[d];
      dof += idx[d] * ds[d];
    }
    copy_bytes(t + dof, s + so, row);
    std::size_t d = nd - 1;
    while (d-- > 0) {
      if (++idx[d] < extent[d]) break;
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

HostTensor narrow(const HostTensor& t, std::int64_t dim, std::int64_t offset, std::int64_t length) {
  Shape shape = t.shape;
  shape[static_cast<std::size_t>(dim)] = length;
  HostTensor out = HostTensor::zeros(shape, t.dtype);
  Shape so(t.shape.size(), 0);
  so[static_cast<std::size_t>(dim)] = offset;
  const Shape zero(t.shape.size(), 0);
  copy_box(t, so, out, zero, shape);
  return out;
}

void divide(HostTensor& t, std::int64_t divisor) {
  const std::int64_t n = t.numel();
  if (comm::is_floating(t.dtype)) {
    for (std::int64_t i = 0; i < n; ++i) t.set(i, t.get(i) / static_cast<double>(divisor));
    return;
  }
  // Integers in their own width: a detour through double would round int64 beyond 2^53.
  auto in_place = [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t i = 0; i < n; ++i) {
      T v;
      std::byte* p = t.data.data() + static_cast<std::size_t>(i) * sizeof(T);
      std::memcpy(&v, p, sizeof(T));
      v = static_cast<T>(v / divisor);
      std::memcpy(p, &v, sizeof(T));
    }
  };
  switch (t.dtype) {
    case comm::DType::i32:
      in_place(std::int32_t{});
      break;
    case comm::DType::i64:
      in_place(std::int64_t{});
      break;
    case comm::DType::i8:
      in_place(std::int8_t{});
      break;
    default:
      in_place(std::uint8_t{});
      break;
  }
}

comm::DType parse_tensor_dtype(std::string_view text) {
  const comm::DType d = comm::parse_dtype(text);
  if (d == comm::DType::i8 || d == comm::DType::u8) {
    throw Error(ErrorKind::value, "tensor dtype '" + std::string(text) +
                                      "' is not supported by the redistribute executor: use "
                                      "float32, float64, float16, bfloat16, int32 or int64");
  }
  return d;
}

// ---- counting --------------------------------------------------------------------------

std::string IssuedComm::to_string() const {
  return format_comm_string(kind, group, reduce_op, src_tensor_dim, dst_tensor_dim);
}

std::vector<std::string> CommLog::strings() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const IssuedComm& c : entries_) out.push_back(c.to_string());
  return out;
}

std::int64_t CommLog::bytes() const {
  std::int64_t b = 0;
  for (const IssuedComm& c : entries_) b += c.bytes;
  return b;
}

CountingCommunicator::CountingCommunicator(std::unique_ptr<comm::Communicator> inner,
                                           std::string group, CommLog* log)
    : inner_(std::move(inner)), group_(std::move(group)), log_(log) {}

void CountingCommunicator::annotate(std::int64_t src_tensor_dim, std::int64_t dst_tensor_dim,
                                    ReduceOp op) {
  src_dim_ = src_tensor_dim;
  dst_dim_ = dst_tensor_dim;
  op_ = op;
}

void CountingCommunicator::note(StepKind kind, std::int64_t bytes) {
  if (log_) {
    log_->record(IssuedComm{kind, group_, op_, src_dim_, dst_dim_, inner_->size(), bytes});
  }
  src_dim_ = dst_dim_ = -1;
  op_ = ReduceOp::sum;
}

void CountingCommunicator::all_reduce(const void* send, void* recv, std::size_t count,
                                      comm::DType dtype, comm::ReduceOp op) {
  inner_->all_reduce(send, recv, count, dtype, op);
  note(StepKind::all_reduce, static_cast<std::int64_t>(count * comm::element_size(dtype)));
}

void CountingCommunicator::all_gather(const void* send, void* recv, std::size_t count,
                                      comm::DType dtype) {
  inner_->all_gather(send, recv, count, dtype);
  note(StepKind::all_gather,
       static_cast<std::int64_t>(count * comm::element_size(dtype)) * inner_->size());
}

void CountingCommunicator::reduce_scatter(const void* send, void* recv, std::size_t count,
                                          comm::DType dtype, comm::ReduceOp op) {
  inner_->reduce_scatter(send, recv, count, dtype, op);
  note(StepKind::reduce_scatter,
       static_cast<std::int64_t>(count * comm::element_size(dtype)) * inner_->size());
}

void CountingCommunicator::all_to_all(const void* send, void* recv, std::size_t count,
                                      comm::DType dtype) {
  inner_->all_to_all(send, recv, count, dtype);
  note(StepKind::all_to_all,
       static_cast<std::int64_t>(count * comm::element_size(dtype)) * inner_->size());
}

void CountingCommunicator::broadcast(const void* send, void* recv, std::size_t count,
                                     comm::DType dtype, int root) {
  // Not a redistribution collective: forwarded, not counted.
  inner_->broadcast(send, recv, count, dtype, root);
}

// ---- groups ------------------------------------------------------------------------------

std::vector<std::vector<int>> mesh_groups(const DeviceMesh& mesh,
                                          std::span<const std::int64_t> dims, int world_size) {
  const std::vector<std::int64_t> shape = mesh.shape();
  std::vector<bool> in_run(shape.size(), false);
  for (std::int64_t d : dims) in_run[static_cast<std::size_t>(d)] = true;
  // A layout that does not cover its rank map leaves the other ranks to sub-meshes of their
  // own (the rows of DeviceMesh.mesh), where coordinates repeat: the row is part of the key.
  std::int64_t ranks_in_rows = 0;
  for (const auto& g : mesh.groups(std::int64_t{0})) ranks_in_rows += std::ssize(g);
  const bool several_rows = ranks_in_rows > mesh.size();
  // (row, outside coordinates) -> (row-major position over dims, rank)
  std::map<std::vector<std::int64_t>, std::vector<std::pair<std::int64_t, int>>> by_key;
  for (int r = 0; r < world_size; ++r) {
    const auto coord = mesh.coordinate(r);
    if (!coord) continue;
    std::vector<std::int64_t> key;
    if (several_rows) key.push_back(mesh.mesh_for_rank(r).values.front());
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (!in_run[i]) key.push_back((*coord)[i]);
    }
    std::int64_t pos = 0;
    for (std::int64_t d : dims) {
      pos = pos * shape[static_cast<std::size_t>(d)] + (*coord)[static_cast<std::size_t>(d)];
    }
    by_key[key].emplace_back(pos, r);
  }
  std::vector<std::vector<int>> groups;
  groups.reserve(by_key.size());
  for (auto& [key, members] : by_key) {
    std::sort(members.begin(), members.end());
    std::vector<int> g;
    g.reserve(members.size());
    for (const auto& m : members) g.push_back(m.second);
    groups.push_back(std::move(g));
  }
  return groups;
}

std::string group_name(const DeviceMesh& mesh, std::span<const std::int64_t> dims) {
  std::vector<std::int64_t> sorted(dims.begin(), dims.end());
  std::sort(sorted.begin(), sorted.end());
  return comm_group_name(mesh, sorted);
}

// ---- executor ----------------------------------------------------------------------------

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

std::vector<std::vector<std::int64_t>> collective_groups(std::span<const TransformStep> steps) {
  std::vector<std::vector<std::int64_t>> out;
  for (const TransformStep& s : steps) {
    if (!is_collective(s.kind) || s.group_size <= 1) continue;
    std::vector<std::int64_t> dims = s.mesh_dims.to_vector();
    std::sort(dims.begin(), dims.end());
    out.push_back(std::move(dims));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::vector<std::int64_t>> groups_of_all_coordinates(
    const DTensorSpec& src, const DTensorSpec& dst, std::span<const PlanOptions> options) {
  const std::vector<std::int64_t> shape = src.mesh.shape();
  std::vector<std::vector<std::int64_t>> out;
  // Every coordinate, row-major; the cached planner shares the plans between the ranks of a
  // threads world, which all ask for the same coordinates.
  std::vector<std::int64_t> coord(shape.size(), 0);
  for (std::int64_t k = 0; k < src.mesh.size(); ++k) {
    for (const PlanOptions& o : options) {
      const std::shared_ptr<const Plan> plan = cached_plan_redistribute(src, dst, coord, o);
      for (auto& g : collective_groups(plan->steps)) out.push_back(std::move(g));
    }
    for (std::size_t i = shape.size(); i-- > 0;) {
      if (++coord[i] < shape[i]) break;
      coord[i] = 0;
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

CountingCommunicator& Redistributor::split_group(std::vector<std::int64_t> key) {
  for (std::int64_t d : key) {
    if (d < 0 || d >= static_cast<std::int64_t>(mesh_.ndim())) {
      throw Error(ErrorKind::value, "mesh dim " + std::to_string(d) + " is outside the " +
                                        std::to_string(mesh_.ndim()) + "-dim mesh " +
                                        to_string(mesh_.layout()));
    }
  }
  std::unique_ptr<comm::Communicator> g = world_->split(mesh_groups(mesh_, key, world_->size()));
  if (!g) {
    throw Error(ErrorKind::runtime, "rank " + std::to_string(world_->rank()) +
                                        " is in no group of mesh dims " + group_name(mesh_, key));
  }
  auto counted =
      std::make_unique<CountingCommunicator>(std::move(g), group_name(mesh_, key), nullptr);
  return *groups_.emplace(std::move(key), std::move(counted)).first->second;
}

void Redistributor::create_groups(std::span<const std::vector<std::int64_t>> dim_sets) {
  for (const std::vector<std::int64_t>& dims : dim_sets) {
    std::vector<std::int64_t> key = dims;
    std::sort(key.begin(), key.end());
    if (!groups_.contains(key)) split_group(std::move(key));
  }
  groups_fixed_ = true;
}

void join_group_splits(comm::Communicator& world, const DeviceMesh& mesh,
                       std::span<const std::vector<std::int64_t>> dim_sets) {
  if (mesh.coordinate(world.rank())) {
    throw Error(ErrorKind::value, "rank " + std::to_string(world.rank()) + " is in the mesh " +
                                      to_string(mesh.layout()) +
                                      ": it creates its groups with its Redistributor");
  }
  // The splits of create_groups on an executor that holds no group yet: each set of dims once,
  // in order of first appearance.
  std::set<std::vector<std::int64_t>> done;
  for (const std::vector<std::int64_t>& dims : dim_sets) {
    std::vector<std::int64_t> key = dims;
    std::sort(key.begin(), key.end());
    if (!done.insert(key).second) continue;
    for (std::int64_t d : key) {
      if (d < 0 || d >= static_cast<std::int64_t>(mesh.ndim())) {
        throw Error(ErrorKind::value, "mesh dim " + std::to_string(d) + " is outside the " +
                                          std::to_string(mesh.ndim()) + "-dim mesh " +
                                          to_string(mesh.layout()));
      }
    }
    world.split(mesh_groups(mesh, key, world.size()));
  }
}

HostTensor Redistributor::redistribute(const DTensorSpec& src, const DTensorSpec& dst,
                                       HostTensor local, const PlanOptions& options, CommLog* log) {
  create_groups(groups_of_all_coordinates(src, dst, std::span(&options, 1)));
  const std::shared_ptr<const Plan> plan = cached_plan_redistribute(src, dst, coordinate_, options);
  return run(plan->steps, std::move(local), log);
}

CountingCommunicator& Redistributor::step_group(const TransformStep& s, CommLog* log) {
  CountingCommunicator& g = group(s.mesh_dims, log);
  // The buffers are sized for the step's group: another size would write past them.
  if (g.size() != s.group_size) {
    throw Error(ErrorKind::runtime,
                "rank " + std::to_string(world_->rank()) + ": the group of mesh dims " +
                    group_name(mesh_, s.mesh_dims) + " has " + std::to_string(g.size()) +
                    " ranks but step " + to_string(s, mesh_) + " runs on " +
                    std::to_string(s.group_size));
  }
  return g;
}

CountingCommunicator& Redistributor::group(std::span<const std::int64_t> dims, CommLog* log) {
  std::vector<std::int64_t> key(dims.begin(), dims.end());
  std::sort(key.begin(), key.end());
  auto it = groups_.find(key);
  CountingCommunicator* g = nullptr;
  if (it != groups_.end()) {
    g = it->second.get();
  } else if (groups_fixed_) {
    // A split here would be a world-wide collective that the other ranks never join.
    throw Error(ErrorKind::runtime,
                "rank " + std::to_string(world_->rank()) + " needs the group of mesh dims " +
                    group_name(mesh_, key) +
                    ", which was not created up front: pass every rank's groups to "
                    "create_groups (groups_of_all_coordinates)");
  } else {
    g = &split_group(std::move(key));
  }
  g->set_log(log);
  return *g;
}

HostTensor Redistributor::run(std::span<const TransformStep> steps, HostTensor local,
                              CommLog* log) {
  for (const TransformStep& s : steps) local = step(s, std::move(local), log);
  return local;
}

HostTensor Redistributor::step(const TransformStep& s, HostTensor x, CommLog* log) {
  const std::int64_t n = s.group_size;
  if (n <= 1) return x;  // test_one_chunk_mesh: a size-1 group issues nothing
  if (x.shape != s.input_shape) {
    throw Error(ErrorKind::value, "local tensor of shape " + shape_string(x.shape) + " but step " +
                                      to_string(s, mesh_) + " expects " +
                                      shape_string(s.input_shape) +
                                      ": plan with this rank's coordinate");
  }
  const std::size_t es = x.element_size();
  const comm::DType dt = x.dtype;
  const std::size_t nd = x.shape.size();
  switch (s.kind) {
    case StepKind::all_reduce: {
      CountingCommunicator& g = step_group(s, log);
      CommBuffer buf(g, x.bytes());
      buf.upload(x);
      g.annotate(-1, -1, s.reduce_op);
      g.all_reduce(buf.get(), buf.get(), static_cast<std::size_t>(x.numel()), dt, (s.reduce_op));
      buf.download(x);
      if (s.avg_scale > 1) divide(x, s.avg_scale);
      return x;
    }
    case StepKind::reduce_scatter: {
      // Pad the scattered dim to n equal pieces, lay the pieces out as n contiguous blocks,
      // reduce-scatter, then trim this rank's piece to its torch.chunk length.
      CountingCommunicator& g = step_group(s, log);
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
      g.reduce_scatter(sb.get(), rb.get(), static_cast<std::size_t>(block), dt, (s.reduce_op));
      rb.download(recv);
      const ChunkRange mine = chunk_range(x.shape[d], n, g.rank());
      HostTensor out = narrow(recv, static_cast<std::int64_t>(d), 0, mine.length);
      if (s.avg_scale > 1) divide(out, s.avg_scale);
      return out;
    }
    case StepKind::all_gather: {
      // Pad to ceil(L/n), gather n blocks, lay them side by side along the dim, trim to L.
      CountingCommunicator& g = step_group(s, log);
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
    case StepKind::all_to_all: {
      // shard_dim_alltoall: pad a to ceil(La/n) and b to ceil(Lb/n)*n; block j holds piece j
      // of b; rank i's block lands at piece i of a; trim a to La and b to this rank's piece.
      CountingCommunicator& g = step_group(s, log);
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
    case StepKind::local_chunk: {
      const auto d = static_cast<std::int64_t>(s.dst_tensor_dim);
      std::int64_t idx = 0;
      const std::vector<std::int64_t> shape = mesh_.shape();
      for (std::int64_t m : s.mesh_dims) {
        idx = idx * shape[static_cast<std::size_t>(m)] + coordinate_[static_cast<std::size_t>(m)];
      }
      const ChunkRange r = chunk_range(x.shape[static_cast<std::size_t>(d)], n, idx);
      return narrow(x, d, r.offset, r.length);
    }
    case StepKind::local_partial:
      if (s.dst.is_partial() && s.dst.reduce_op() == ReduceOp::sum) divide(x, n);
      return x;
  }
  return x;
}

}  // namespace meshgate

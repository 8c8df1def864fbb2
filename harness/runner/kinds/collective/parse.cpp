// Reading a collective case: its op, mesh and groups, dtype and reduction, sizes and in-place
// settings; its keys and memory estimate.

#include "kinds/collective/collective_case.hpp"

namespace meshgate::runner {
namespace collective_kind {
namespace {

// ---- reading the case ---------------------------------------------------------------------

// The mesh must build here (groups and sizes depend on it): a mesh the library rejects is a
// rejection of the case.
DeviceMesh read_mesh(CaseNode& node) {
  const MeshSpec spec = read_mesh_spec(node);
  check_runnable_mesh(node, spec);
  try {
    return spec.build();
  } catch (const meshgate::Error& err) {
    reject_value(node, "mesh", err.what());
  }
}

}  // namespace

MemoryEstimate CollectiveCase::memory_estimate() const {
  const std::int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  const double send = static_cast<double>(send_bytes(largest));
  const double recv = static_cast<double>(recv_bytes(largest));
  const double staging = std::max(send, static_cast<double>(recv_bytes(largest)));
  const bool scratch =
      op->in_place_scratch && std::find(inplace.begin(), inplace.end(), true) != inplace.end();
  const double per_rank = send + recv + staging + (scratch ? recv : 0.0);
  std::string detail = std::to_string(group_size * static_cast<int>(groups.size())) +
                       " ranks x (send " + format_byte_size(send);
  if (recv > 0) detail += " + receive " + format_byte_size(recv);
  detail += " + host staging " + format_byte_size(staging);
  if (scratch) {
    detail += " + in-place " + std::string(op->name) + " scratch " + format_byte_size(recv);
  }
  return {per_rank * group_size * static_cast<double>(groups.size()), "bytes", detail + ")"};
}

}  // namespace collective_kind

using namespace collective_kind;

const std::vector<std::string>& collective_case_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = mesh_spec_keys("mesh");
    for (std::string key : {"op", "group", "dtype", "reduce", "root", "seed", "bytes", "bytes.from",
                            "bytes.to", "bytes.factor", "inplace"})
      k.push_back(std::move(key));
    return k;
  }();
  return keys;
}

namespace collective_kind {
namespace {

// `group`: the dims whose groups run the collective (all of a named mesh's when absent), the
// groups' case ranks and the ranks the case runs on. Returns the dims as written.
std::vector<std::string> read_groups(CaseNode& node, CollectiveCase& c) {
  const DeviceMesh mesh = read_mesh(node);
  std::vector<std::string> group_dims;
  if (YAML::Node v = node.raw("group"); v && !v.IsNull()) {
    group_dims = read_dim_names(v, node, "group");
    if (group_dims.empty())
      node.fail_at(v, "group", "expected a dim name or a non-empty list of dim names");
  } else if (mesh.names().empty()) {
    if (mesh.ndim() != 1) node.fail("group", "is required for an unnamed mesh of several dims");
  } else {
    group_dims = mesh.names();
  }
  std::vector<std::vector<std::int64_t>> groups;
  try {
    if (group_dims.empty()) {
      groups = mesh.groups(std::int64_t{0});
    } else if (group_dims.size() == 1) {
      groups = mesh.groups(group_dims.front());
    } else {
      // Several dims: the groups of their flattened dim, as DeviceMesh._flatten makes it.
      groups = mesh.slice(group_dims).flatten().groups(std::int64_t{0});
    }
  } catch (const meshgate::Error& err) {
    reject_value(node, "group", err.what());
  }
  c.mesh = mesh;
  if (group_dims.empty()) c.dims = {0};
  for (const std::string& dim : group_dims) {
    const auto& names = mesh.names();
    c.dims.push_back(std::find(names.begin(), names.end(), dim) - names.begin());
  }
  std::int64_t highest = 0;
  for (const auto& group : groups) {
    std::vector<int> ranks;
    for (std::int64_t r : group) {
      ranks.push_back(static_cast<int>(r));
      highest = std::max(highest, r);
    }
    c.groups.push_back(std::move(ranks));
  }
  c.group_size = static_cast<int>(c.groups.front().size());
  c.case_ranks = case_world_size(node, highest);
  return group_dims;
}

// `dtype`, and `reduce` for the ops that reduce.
void read_dtype_and_reduce(CaseNode& node, CollectiveCase& c, const std::string& op,
                           const std::string& dtype) {
  try {
    c.dtype = comm::parse_dtype(dtype);
  } catch (const meshgate::Error& err) {
    reject_value(node, "dtype", err.what());
  }
  if (c.op->reduces) {
    const std::string reduce = node.required<std::string>("reduce");
    try {
      c.reduce = parse_reduce_op(reduce);
    } catch (const meshgate::Error& err) {
      reject_value(node, "reduce", err.what());
    }
    // No backend rounds an integer average, so such a case could never run: a rejection of
    // its input here, with file and line, rather than a kernel failure at run time.
    if (c.reduce == ReduceOp::avg && !comm::is_floating(c.dtype)) {
      reject_value(node, "reduce",
                   "avg of " + dtype +
                       " is supported by no backend (it would round): use a floating-point "
                       "dtype, or sum");
    }
    // An average is checked exactly with inputs that are multiples of the group size: the
    // smallest, the group size itself, must be exact in the dtype.
    if (c.reduce == ReduceOp::avg && avg_budget(c.dtype, c.group_size) < 1) {
      reject_value(node, "reduce",
                   "avg of " + dtype + " on groups of " + std::to_string(c.group_size) +
                       " ranks cannot be checked exactly: its inputs are multiples of the group "
                       "size, and " +
                       dtype + " holds integers exactly only up to " +
                       std::to_string(exact_limit(c.dtype)) +
                       "; use float32 or groups of at most that many ranks");
    }
  } else if (node.has("reduce")) {
    node.fail("reduce",
              "only " +
                  collective_names([](const CollectiveEntry& e) { return e.reduces; }, " and ") +
                  " reduce; remove it for " + op);
  }
}

void read_root_and_seed(CaseNode& node, CollectiveCase& c) {
  if (auto root = node.optional<int>("root")) {
    if (!c.op->has_root) {
      node.fail("root",
                "only " +
                    collective_names([](const CollectiveEntry& e) { return e.has_root; }, " and ") +
                    " has a root");
    }
    if (*root < 0 || *root >= c.group_size) {
      reject_value(node, "root",
                   "must be a rank of the group, 0 to " + std::to_string(c.group_size - 1) +
                       ", got " + std::to_string(*root));
    }
    c.root = *root;
  }
  if (auto seed = node.optional<std::int64_t>("seed")) c.seed = static_cast<std::uint64_t>(*seed);
}

// `bytes: {from, to, factor}`.
void read_sweep(CaseNode& node, CollectiveCase& c, std::int64_t unit,
                const std::string& unit_text) {
  CaseNode sweep = node.child("bytes");
  if (!sweep.has("from") || !sweep.has("to")) node.fail("bytes", "a sweep needs from and to");
  const std::int64_t from = read_byte_size(sweep, sweep.raw("from"), "from", ZeroBytes::rejected);
  const std::int64_t to = read_byte_size(sweep, sweep.raw("to"), "to", ZeroBytes::rejected);
  const int factor = sweep.optional<int>("factor").value_or(2);
  if (factor < 2)
    reject_value(sweep, "factor", "must be at least 2, got " + std::to_string(factor));
  if (to < from) {
    reject_value(sweep, "to",
                 "must be at least from (" + std::to_string(from) + " B), got " +
                     std::to_string(to) + " B");
  }
  // As nccl-tests, a swept size is rounded down to what divides; those that round to 0 go.
  for (std::int64_t s = from; s <= to;) {
    const std::int64_t aligned = s - s % unit;
    if (aligned > 0 && (c.sizes.empty() || c.sizes.back() != aligned))
      c.sizes.push_back(aligned);
    if (s > to / factor) break;  // the next size is past `to` (and might overflow)
    s *= factor;
  }
  if (c.sizes.empty()) {
    reject_value(node, "bytes", "no size of the sweep holds " + unit_text);
  }
}

// `bytes: N` or a list of sizes, each dividing into `unit`.
void read_size_list(CaseNode& node, CollectiveCase& c, const YAML::Node& bytes,
                    std::int64_t unit, const std::string& unit_text, const std::string& op) {
  std::vector<YAML::Node> items;
  if (bytes.IsSequence()) {
    for (const auto& item : bytes) items.push_back(item);
  } else {
    items.push_back(bytes);
  }
  if (items.empty()) node.fail("bytes", "the list of sizes is empty");
  for (const YAML::Node& item : items) {
    const std::int64_t b = read_byte_size(node, item, "bytes", ZeroBytes::rejected);
    if (b % unit != 0) {
      reject_value_at(node, item, "bytes",
                      std::to_string(b) + " B does not divide into " + unit_text + " for " + op +
                          " on groups of " + std::to_string(c.group_size));
    }
    // A size listed twice would be run twice and shown once in the per-size table.
    if (std::find(c.sizes.begin(), c.sizes.end(), b) != c.sizes.end()) {
      node.fail_at(item, "bytes", "lists " + std::to_string(b) + " B twice");
    }
    c.sizes.push_back(b);
  }
}

// Sizes: whole elements, and for the chunked ops whole equal chunks per rank. They have no cap
// of their own: what a size may be is what the case's memory limit lets its buffers hold
// (memory_estimate), so that a machine with the memory runs nccl-tests' sweeps to 8 GiB and
// beyond.
void read_sizes(CaseNode& node, CollectiveCase& c, const std::string& op,
                const std::string& dtype) {
  const std::int64_t es = static_cast<std::int64_t>(comm::element_size(c.dtype));
  const bool chunked = c.op->chunked;
  const std::int64_t unit = chunked ? es * c.group_size : es;
  const std::string unit_text = chunked
                                    ? std::to_string(c.group_size) + " equal chunks of whole " +
                                          dtype + " elements (" + std::to_string(unit) + " B)"
                                    : "whole " + dtype + " elements (" + std::to_string(es) + " B)";
  YAML::Node bytes = node.raw("bytes");
  if (!bytes || bytes.IsNull())
    node.fail("bytes", "is required: a size, a list or {from, to, factor}");
  if (bytes.IsMap()) {
    read_sweep(node, c, unit, unit_text);
  } else {
    read_size_list(node, c, bytes, unit, unit_text, op);
  }
}

void read_inplace(CaseNode& node, CollectiveCase& c) {
  if (YAML::Node v = node.raw("inplace"); v && !v.IsNull()) {
    c.inplace.clear();
    const auto read_flag = [&](const YAML::Node& item) {
      bool flag = false;
      if (!item.IsScalar() || !YAML::convert<bool>::decode(item, flag)) {
        node.fail_at(item, "inplace", "expected true, false or [false, true]");
      }
      if (std::find(c.inplace.begin(), c.inplace.end(), flag) != c.inplace.end()) {
        node.fail_at(item, "inplace", "lists the same setting twice");
      }
      c.inplace.push_back(flag);
    };
    if (v.IsSequence()) {
      for (const auto& item : v) read_flag(item);
      if (c.inplace.empty()) node.fail("inplace", "expected true, false or [false, true]");
    } else {
      read_flag(v);
    }
  }
}

}  // namespace
}  // namespace collective_kind

std::unique_ptr<PreparedCase> parse_collective_case(CaseNode& node, bool expect_error) {
  auto c = std::make_unique<CollectiveCase>();
  c->expect_error = expect_error;

  const std::string op = node.required<std::string>("op");
  c->op = find_collective(op);
  if (c->op == nullptr) {
    node.fail("op", "unknown op '" + op + "': expected " +
                        collective_names([](const CollectiveEntry&) { return true; }, " or "));
  }

  const std::vector<std::string> group_dims = read_groups(node, *c);
  const std::string dtype = node.required<std::string>("dtype");
  read_dtype_and_reduce(node, *c, op, dtype);
  read_root_and_seed(node, *c);
  read_sizes(node, *c, op, dtype);
  read_inplace(node, *c);

  c->params_json = {{"op", op},
                    {"mesh", yaml_to_json(node.node()["mesh"])},
                    {"group", group_dims},
                    {"dtype", dtype},
                    {"bytes", c->sizes},
                    {"inplace", c->inplace},
                    {"group_size", c->group_size},
                    {"ranks", c->case_ranks}};
  if (c->reduce) c->params_json["reduce"] = std::string(to_string(*c->reduce));
  if (c->op->has_root) c->params_json["root"] = c->root;
  if (c->seed != 0) c->params_json["seed"] = c->seed;
  return c;
}

}  // namespace meshgate::runner

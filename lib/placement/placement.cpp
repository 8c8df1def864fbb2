#include "placement/placement.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "core/error.hpp"

namespace meshgate {
namespace {

constexpr std::string_view kAcceptedForms =
    "accepted forms: S(0), Shard(dim=0), R, Replicate(), P(sum), Partial(avg) with reduce op "
    "sum, avg, max, min or product";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad_placement(std::string_view text, std::string_view why) {
  throw Error(ErrorKind::value, "cannot parse placement '" + std::string(text) +
                                    "': " + std::string(why) + "; " + std::string(kAcceptedForms));
}

std::string py_list(std::span<const std::int64_t> v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

void Placement::throw_wrong_kind(std::string_view accessor) const {
  throw Error(ErrorKind::assertion,
              std::string(accessor) + "() of " + to_long_string(*this) +
                  (accessor == "dim" ? ": only Shard has a dim" : ": only Partial has a reduce op"));
}

std::string to_string(const Placement& p) {
  switch (p.kind()) {
    case Placement::Kind::shard:
      return "S(" + std::to_string(p.dim()) + ")";
    case Placement::Kind::replicate:
      return "R";
    case Placement::Kind::partial:
      return "P(" + std::string(to_string(p.reduce_op())) + ")";
  }
  return "?";
}

std::string to_long_string(const Placement& p) {
  switch (p.kind()) {
    case Placement::Kind::shard:
      return "Shard(dim=" + std::to_string(p.dim()) + ")";
    case Placement::Kind::replicate:
      return "Replicate()";
    case Placement::Kind::partial:
      return "Partial(" + std::string(to_string(p.reduce_op())) + ")";
  }
  return "?";
}

Placement parse_placement(std::string_view text) {
  const std::string_view t = trim(text);
  if (t.empty()) bad_placement(text, "it is empty");
  const std::size_t open = t.find('(');
  const std::string_view head = trim(t.substr(0, open));
  std::string_view arg;
  bool has_parens = false;
  if (open != std::string_view::npos) {
    if (t.back() != ')') bad_placement(text, "missing ')'");
    arg = trim(t.substr(open + 1, t.size() - open - 2));
    has_parens = true;
    if (arg.find_first_of("()") != std::string_view::npos) bad_placement(text, "nested '('");
  }
  auto strip_keyword = [&](std::string_view keyword) {
    if (arg.substr(0, keyword.size()) == keyword) {
      std::string_view rest = trim(arg.substr(keyword.size()));
      if (!rest.empty() && rest.front() == '=') arg = trim(rest.substr(1));
    }
  };
  if (head == "S" || head == "Shard") {
    if (!has_parens || arg.empty()) bad_placement(text, "Shard needs a tensor dim, as S(0)");
    strip_keyword("dim");
    std::int64_t dim = 0;
    const auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), dim);
    if (ec != std::errc() || end != arg.data() + arg.size()) {
      bad_placement(text, "the shard dim '" + std::string(arg) + "' is not an integer");
    }
    if (dim < -1024 || dim > 1024) {
      bad_placement(text, "the shard dim " + std::to_string(dim) + " is out of range");
    }
    return Placement::shard(static_cast<std::int32_t>(dim));
  }
  if (head == "R" || head == "Replicate") {
    if (!arg.empty()) bad_placement(text, "Replicate takes no argument");
    return Placement::replicate();
  }
  if (head == "P" || head == "Partial") {
    strip_keyword("reduce_op");
    if (arg.empty()) return Placement::partial(ReduceOp::sum);
    try {
      return Placement::partial(parse_reduce_op(arg));
    } catch (const Error&) {
      bad_placement(text, "unknown reduce op '" + std::string(arg) + "'");
    }
  }
  bad_placement(text, "unknown placement '" + std::string(head) + "'");
}

std::vector<Placement> parse_placements(std::string_view text) {
  std::string_view t = trim(text);
  // No placement starts with a bracket, so a leading one always wraps the list.
  if (!t.empty() && (t.front() == '[' || t.front() == '(')) {
    const char close = t.front() == '[' ? ']' : ')';
    if (t.size() < 2 || t.back() != close) {
      throw Error(ErrorKind::value, "cannot parse placements '" + std::string(text) +
                                        "': missing '" + std::string(1, close) + "' at the end");
    }
    t = trim(t.substr(1, t.size() - 2));
  }
  if (t.empty()) {
    throw Error(ErrorKind::value,
                "cannot parse placements '" + std::string(text) + "': the list is empty");
  }
  std::vector<Placement> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= t.size(); ++i) {
    if (i < t.size() && t[i] == '(') ++depth;
    if (i < t.size() && t[i] == ')') --depth;
    if (i == t.size() || (t[i] == ',' && depth == 0)) {
      const std::string_view item = t.substr(start, i - start);
      try {
        out.push_back(parse_placement(item));
      } catch (const Error& e) {
        throw Error(ErrorKind::value, "in placements '" + std::string(text) + "', item " +
                                          std::to_string(out.size()) + ": " +
                                          std::string(e.what()).substr(12));
      }
      start = i + 1;
    }
  }
  return out;
}

std::string to_string(std::span<const Placement> ps, bool long_form) {
  std::string s = "(";
  for (std::size_t i = 0; i < ps.size(); ++i) {
    s += (i ? ", " : "") + (long_form ? to_long_string(ps[i]) : to_string(ps[i]));
  }
  return s + (ps.size() == 1 ? ",)" : ")");
}

void check_no_mixed_partial_types(std::span<const Placement> ps) {
  bool seen = false;
  ReduceOp first = ReduceOp::sum;
  for (const Placement& p : ps) {
    if (!p.is_partial()) continue;
    const ReduceOp op = p.reduce_op();
    if (!seen) {
      first = op;
      seen = true;
      continue;
    }
    const bool linear_pair = (op == ReduceOp::sum || op == ReduceOp::avg) &&
                             (first == ReduceOp::sum || first == ReduceOp::avg);
    if (op != first && !linear_pair) {
      throw Error(ErrorKind::value,
                  "Partial placements of different reduce ops in " + to_string(ps, true) +
                      ": only sum and avg may be mixed; give every Partial the same op");
    }
  }
}

void throw_bad_chunk(std::int64_t size, std::int64_t parts, std::int64_t index) {
  throw Error(ErrorKind::value, "chunk_range(size=" + std::to_string(size) +
                                    ", parts=" + std::to_string(parts) +
                                    ", index=" + std::to_string(index) +
                                    "): need size >= 0 and 0 <= index < parts");
}

DTensorSpec DTensorSpec::create(DeviceMesh mesh, std::vector<Placement> placements, Shape shape,
                                std::int64_t element_size) {
  if (placements.size() != mesh.ndim()) {
    throw Error(ErrorKind::value, "placements " + to_string(placements) + " have " +
                                      std::to_string(placements.size()) +
                                      " entries but the mesh has " + std::to_string(mesh.ndim()) +
                                      " dims: give one placement per mesh dim");
  }
  const auto rank = static_cast<std::int64_t>(shape.size());
  for (std::int64_t s : shape) {
    if (s < 0)
      throw Error(ErrorKind::value, "tensor shape " + py_list(shape) + " has a negative size");
  }
  if (element_size < 1) {
    throw Error(ErrorKind::value,
                "element size " + std::to_string(element_size) + " must be at least 1 byte");
  }
  // Plans count a collective's buffer in int64 bytes, padded to whole chunks: at most the
  // tensor's bytes times its group's ranks (a dim of 1 padded for 8 ranks holds 8). Every size
  // counts as at least 1, so that an empty dim does not hide a huge one, which pads all the
  // same.
  std::int64_t bytes = element_size;
  for (std::int64_t s : shape) {
    const std::int64_t factor = std::max<std::int64_t>(s, 1);
    if (bytes > kMaxPlannedBytes / factor) {
      bytes = kMaxPlannedBytes + 1;
      break;
    }
    bytes *= factor;
  }
  if (bytes > kMaxPlannedBytes / std::max<std::int64_t>(mesh.size(), 1)) {
    throw Error(ErrorKind::value,
                "tensor shape " + py_list(shape) + " of " + std::to_string(element_size) +
                    "-byte elements is too large to plan on a mesh of " +
                    std::to_string(mesh.size()) +
                    " ranks: its bytes times the ranks must stay within 2^62, the most a plan "
                    "counts a padded buffer in; give smaller sizes");
  }
  for (Placement& p : placements) {
    if (!p.is_shard()) continue;
    std::int64_t d = p.dim();
    if (d < -rank || d >= rank) {
      throw Error(ErrorKind::value, "Shard(dim=" + std::to_string(d) + ") on a tensor of shape " +
                                        py_list(shape) + ": the dim must be in [" +
                                        std::to_string(-rank) + ", " + std::to_string(rank) + ")");
    }
    if (d < 0) p = Placement::shard(static_cast<std::int32_t>(d + rank));
  }
  check_no_mixed_partial_types(placements);
  return DTensorSpec{std::move(mesh), std::move(placements), std::move(shape), element_size};
}

bool operator==(const DTensorSpec& a, const DTensorSpec& b) {
  return a.placements == b.placements && a.shape == b.shape && a.element_size == b.element_size &&
         a.mesh.model() == b.mesh.model() && a.mesh.layout() == b.mesh.layout() &&
         a.mesh.names() == b.mesh.names();
}

LocalShard local_shard(std::span<const std::int64_t> mesh_shape,
                       std::span<const Placement> placements, std::span<const std::int64_t> shape,
                       std::span<const std::int64_t> coordinate) {
  if (coordinate.size() != mesh_shape.size() || placements.size() != mesh_shape.size()) {
    throw Error(ErrorKind::value, "local_shard: coordinate " + py_list(coordinate) + " and " +
                                      std::to_string(placements.size()) +
                                      " placements must have one entry per mesh dim of " +
                                      py_list(mesh_shape));
  }
  LocalShard out{Shape(shape.begin(), shape.end()), Shape(shape.size(), 0)};
  for (std::size_t i = 0; i < mesh_shape.size(); ++i) {
    if (coordinate[i] < 0 || coordinate[i] >= mesh_shape[i]) {
      throw Error(ErrorKind::value, "coordinate " + py_list(coordinate) +
                                        " is outside the mesh of shape " + py_list(mesh_shape));
    }
    if (!placements[i].is_shard()) continue;
    const auto d = static_cast<std::size_t>(placements[i].dim());
    if (d >= out.shape.size()) {
      throw Error(ErrorKind::value, to_long_string(placements[i]) + " on a tensor of rank " +
                                        std::to_string(out.shape.size()));
    }
    const ChunkRange c = chunk_range(out.shape[d], mesh_shape[i], coordinate[i]);
    out.offset[d] += c.offset;
    out.shape[d] = c.length;
  }
  return out;
}

LocalShard local_shard(const DTensorSpec& spec, std::span<const std::int64_t> coordinate) {
  const std::vector<std::int64_t> mesh_shape = spec.mesh.shape();
  return local_shard(mesh_shape, spec.placements, spec.shape, coordinate);
}

std::int64_t num_shards(std::span<const std::int64_t> mesh_shape,
                        std::span<const Placement> placements) {
  std::int64_t n = 1;
  for (std::size_t i = 0; i < placements.size() && i < mesh_shape.size(); ++i) {
    if (placements[i].is_shard()) n *= mesh_shape[i];
  }
  return n;
}

}  // namespace meshgate

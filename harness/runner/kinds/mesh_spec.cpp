#include "kinds/mesh_spec.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "diagnostics.hpp"
#include "kinds/case_values.hpp"
#include "kinds/memory_estimates.hpp"
#include "layout/mesh_layout.hpp"

namespace meshgate::runner {
namespace {

std::vector<std::int64_t> read_ranks(const YAML::Node& value, const CaseNode& at) {
  if (value.IsSequence()) return read_int_list(value, at, "ranks");
  const std::string text = value.IsScalar() ? value.Scalar() : "";
  const auto dots = text.find("..");
  try {
    if (dots != std::string::npos) {
      std::size_t used_first = 0;
      std::size_t used_last = 0;
      const std::int64_t first = std::stoll(text.substr(0, dots), &used_first);
      const std::int64_t last = std::stoll(text.substr(dots + 2), &used_last);
      // A bound on the range keeps a typo such as "0..10000000000" from exhausting memory.
      if (used_first == dots && used_last == text.size() - dots - 2 && 0 <= first &&
          first <= last && last < kMaxCaseRanks) {
        std::vector<std::int64_t> ranks;
        for (std::int64_t r = first; r <= last; ++r) ranks.push_back(r);
        return ranks;
      }
    }
  } catch (const std::exception&) {
  }
  at.fail_at(value, "ranks",
             "expected a list of ranks or an inclusive range of ranks from 0 up, such as "
             "\"8..15\"");
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out;
  for (const std::int64_t s : shape) out += (out.empty() ? "" : "x") + std::to_string(s);
  return out;
}

// "[2, 4]": a size list as torch prints it in its messages.
std::string torch_list(const std::vector<std::int64_t>& items) {
  std::string out;
  for (const std::int64_t i : items) out += (out.empty() ? "" : ", ") + std::to_string(i);
  return "[" + out + "]";
}

// The layout the mesh tensor of a `shape` mesh has: row-major.
Layout spec_layout(const MeshSpec& spec) {
  if (spec.layout) return *spec.layout;
  std::vector<IntTuple> sizes(spec.shape->begin(), spec.shape->end());
  return Layout(IntTuple::tuple(std::move(sizes)));
}

// The rank list against the mesh it fills, as the reference constructor checks it.
// `shape`: DeviceMesh(mesh=tensor) takes the ranks as the mesh tensor itself, one rank per
// position, so the count must be the mesh's size exactly. `layout`: the private constructor
// takes any rank map of at least cosize ranks that the mesh tensor and every dim's process
// groups (remap views) fit; a larger map gives the mesh several rows.
void check_rank_count(const MeshSpec& spec, const CaseNode& at, const YAML::Node& value) {
  const auto count = static_cast<std::int64_t>(spec.ranks.size());
  if (spec.shape) {
    std::int64_t positions = 1;
    bool overflow = false;
    for (const std::int64_t s : *spec.shape)
      overflow = overflow || __builtin_mul_overflow(positions, s, &positions);
    if (overflow || positions != count) {
      // PyTorch's words are those of torch.tensor(ranks).view(shape), which builds the mesh.
      reject_value_at(
          at, value, "ranks",
          "RuntimeError: shape '" + torch_list(*spec.shape) + "' is invalid for input of size " +
              std::to_string(count) + " (" + std::to_string(count) + " ranks for a mesh of " +
              (overflow ? "more than 2^63" : std::to_string(positions)) + " (shape " +
              shape_text(*spec.shape) + "): list one rank per mesh position, in row-major order)");
    }
    return;
  }
  // An overlapping layout is rejected at creation whatever the ranks; that error names the
  // layout, not the ranks.
  if (!check_non_overlap(*spec.layout)) return;
  const std::int64_t fitting = DeviceMesh::default_rank_count(*spec.layout);
  try {
    DeviceMesh::check_rank_map_size(*spec.layout, fitting, spec.names);
  } catch (const meshgate::Error&) {
    return;  // no rank map fits this layout: creation says why
  }
  try {
    DeviceMesh::check_rank_map_size(*spec.layout, count, spec.names);
  } catch (const meshgate::Error& err) {
    reject_value_at(at, value, "ranks",
                    std::string(err.what()) + " (" + std::to_string(count) +
                        " ranks for the layout " + to_string(*spec.layout) + ": " +
                        std::to_string(fitting) + " ranks, or any multiple of " +
                        std::to_string(fitting) +
                        ", fit its mesh tensor and the process groups of every dim)");
  }
}

// A rank listed twice, rejected before any mesh is built in the words PyTorch's constructor
// has for it (DeviceMesh::check_distinct_ranks), seen from the rank map's first rank. A layout
// that overlaps or that the rank map does not fit is left to creation, which reports that
// first, as the reference does.
void check_distinct_ranks(const MeshSpec& spec, const CaseNode& at, const YAML::Node& value) {
  const Layout layout = spec_layout(spec);
  if (!check_non_overlap(layout)) return;
  try {
    DeviceMesh::check_rank_map_size(layout, static_cast<std::int64_t>(spec.ranks.size()));
  } catch (const meshgate::Error&) {
    return;
  }
  try {
    DeviceMesh::check_distinct_ranks(layout, spec.ranks);
  } catch (const meshgate::Error& err) {
    reject_value_at(at, value, "ranks", err.what());
  }
}

// Without ranks, a layout mesh gets the smallest rank map that its mesh tensor and every dim's
// process groups fit: a multiple of the span of each dim's complement, far above the cosize
// when those spans share no factor ((2,2,2,2):(853,421,211,101) needs 1.5e10 ranks for a
// cosize of 1587). A rank map beyond the size, the cosize and the bound of a written range of
// ranks is refused before it is allocated, with a message that says why it is so large.
void check_default_rank_count(const MeshSpec& spec, CaseNode& at) {
  const std::int64_t count = DeviceMesh::default_rank_count(*spec.layout);
  const double listed = std::max(mesh_ranks_estimate(spec), cosize_estimate(*spec.layout));
  if (static_cast<double>(count) <= std::max(kMaxCaseRanks, listed)) return;
  reject_value(at, "layout",
               "the layout " + to_string(*spec.layout) + " needs a rank map of " +
                   std::to_string(count) +
                   " ranks (the smallest that its mesh tensor and the process groups of every dim "
                   "fit, a multiple of the span of each dim's complement), more than the " +
                   std::to_string(static_cast<std::int64_t>(kMaxCaseRanks)) +
                   " a case may hold: use strides that divide each other");
}

}  // namespace

DeviceMesh MeshSpec::build(LayoutModel model, std::optional<std::int64_t> current_rank) const {
  return layout ? DeviceMesh::from_layout(*layout, names, ranks, model, current_rank)
                : DeviceMesh::create(*shape, names, ranks, model, current_rank);
}

std::vector<std::string> mesh_spec_keys(std::string_view key) {
  const std::string k(key);
  return {k, k + ".shape", k + ".layout", k + ".names", k + ".ranks"};
}

MeshSpec read_mesh_spec(CaseNode& node, std::string_view key) {
  MeshSpec spec;
  const std::string k(key);
  CaseNode m = node.child(k);
  const bool has_shape = m.has("shape");
  const bool has_layout = m.has("layout");
  if (has_shape == has_layout)
    node.fail(k, "give exactly one of " + k + ".shape or " + k + ".layout");
  // Sizes below 1 keep meshgate's words: PyTorch has no check of its own for them and fails in
  // unrelated code (ZeroDivisionError in cosize, an empty AssertionError in complement,
  // torch.arange or view errors), with a text that depends on the mix of sizes.
  if (has_shape) {
    spec.shape = m.required<std::vector<std::int64_t>>("shape");
    if (spec.shape->empty()) reject_value(m, "shape", "a mesh has at least one dim");
    for (std::int64_t s : *spec.shape) {
      if (s <= 0) reject_value(m, "shape", "mesh sizes must be positive");
    }
  } else {
    YAML::Node v = m.raw("layout");
    try {
      spec.layout = read_layout(v, m, "layout");
    } catch (const meshgate::Error& err) {
      reject_value_at(m, v, "layout", err.what());
    }
    if (spec.layout->rank() == 0) reject_value_at(m, v, "layout", "a mesh has at least one dim");
    for (const std::int64_t s : leaves(spec.layout->shape())) {
      if (s <= 0) reject_value_at(m, v, "layout", "mesh sizes must be positive");
    }
  }
  if (YAML::Node v = m.raw("names"); v && !v.IsNull()) {
    spec.names = read_dim_names(v, m, "names");
    const std::size_t ndim = spec.shape ? spec.shape->size() : spec.layout->rank();
    // init_device_mesh's own check, so the message opens with PyTorch's words.
    try {
      DeviceMesh::check_dim_names(spec.names, ndim);
    } catch (const meshgate::Error& err) {
      // Repeats are checked first; the explanation follows the check that failed.
      std::vector<std::string> sorted = spec.names;
      std::sort(sorted.begin(), sorted.end());
      const bool repeated = std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
      reject_value_at(m, v, "names",
                      std::string(err.what()) + " (" +
                          (repeated ? std::string("give every dim a name of its own")
                                    : std::to_string(spec.names.size()) + " names for a mesh of " +
                                          std::to_string(ndim) + " dims: give one name per dim") +
                          ")");
    }
  }
  if (YAML::Node v = m.raw("ranks"); v && !v.IsNull()) {
    spec.ranks = read_ranks(v, m);
    // In PyTorch's order: the mesh tensor's shape, then the process groups, which meet a rank
    // named twice and then a rank out of range.
    check_rank_count(spec, m, v);
    check_distinct_ranks(spec, m, v);
    // A rank is a process index: the reference would name it in new_group and fail there.
    for (std::size_t i = 0; i < spec.ranks.size(); ++i) {
      if (spec.ranks[i] < 0) {
        reject_value_at(m, v.IsSequence() ? v[i] : v, "ranks",
                        "ValueError: Rank " + std::to_string(spec.ranks[i]) +
                            " is out of range. (rank " + std::to_string(spec.ranks[i]) +
                            " is negative: ranks are process indices 0, 1, 2, ...)");
      }
    }
  } else if (spec.layout) {
    check_default_rank_count(spec, m);
  }
  return spec;
}

std::vector<std::string> read_dim_names(const YAML::Node& value, const CaseNode& at,
                                        std::string_view key) {
  const auto read_name = [&](const YAML::Node& item) {
    if (!item.IsScalar()) at.fail_at(item, key, "expected a dim name");
    // Dim names are printed in plans and messages: no control characters.
    if (const auto control = first_control_character(item.Scalar())) {
      at.fail_at(item, key, "a dim name contains the control character " + *control);
    }
    return item.Scalar();
  };
  if (value.IsScalar()) return {read_name(value)};
  if (!value.IsSequence()) at.fail_at(value, key, "expected a dim name or a list of dim names");
  std::vector<std::string> names;
  for (const auto& item : value) names.push_back(read_name(item));
  return names;
}

}  // namespace meshgate::runner

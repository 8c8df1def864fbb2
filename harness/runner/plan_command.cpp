#include "plan_command.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <vector>

#include "byte_size.hpp"
#include "core/error.hpp"
#include "plan/plan.hpp"

namespace meshgate::runner {
namespace {

struct PlanArgs {
  std::vector<std::int64_t> mesh_shape;
  std::vector<std::string> mesh_names;
  std::vector<std::pair<std::vector<std::string>, std::string>>
      flatten;  // dims, name ("" = default)
  std::string from;
  std::string to;
  Shape shape = {1024, 1024};
  std::string dtype = "float32";
  std::vector<std::int64_t> coordinate;
  PlanOptions options;
  bool json = false;
};

class PlanUsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The most ranks a mesh may have here. The planner reads layouts only, but the DeviceMesh it
// plans on is built as PyTorch's is, with its rank map listed and checked rank by rank (about
// 40 bytes and 60 ns a rank): 2^22 ranks plan in a quarter of a second and 170 MB, while
// 16384x16384 took 34 s and 10 GB and larger meshes ran out of memory.
constexpr std::int64_t kMaxPlanRanks = std::int64_t{1} << 22;

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == sep) {
      out.emplace_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

std::int64_t parse_int(std::string_view text, std::string_view what) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw PlanUsageError(std::string(what) + ": '" + std::string(text) + "' is not an integer");
  }
  return v;
}

std::vector<std::int64_t> parse_ints(std::string_view text, char sep, std::string_view what) {
  std::vector<std::int64_t> out;
  for (const std::string& item : split(text, sep)) out.push_back(parse_int(item, what));
  return out;
}

std::int64_t element_size(const std::string& dtype) {
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "float16" || dtype == "bfloat16" || dtype == "int16") return 2;
  if (dtype == "float64" || dtype == "int64") return 8;
  if (dtype == "int8" || dtype == "uint8") return 1;
  throw PlanUsageError("--dtype " + dtype +
                       ": use float32, float16, bfloat16, float64, int64, int32, int16, int8 or "
                       "uint8");
}

std::string join(std::span<const std::int64_t> v, std::string_view sep = ", ") {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i)
    s += (i ? std::string(sep) : "") + std::to_string(v[i]);
  return s;
}

// "A,B,C": names for an unnamed mesh of `ndim` dims, for remedies that need named dims.
std::string example_names(std::size_t ndim) {
  std::string out;
  for (std::size_t i = 0; i < ndim; ++i) {
    out += (i ? "," : "") +
           (i < 26 ? std::string(1, static_cast<char>('A' + i)) : "d" + std::to_string(i));
  }
  return out;
}

PlanArgs parse_args(std::span<const std::string> args) {
  PlanArgs a;
  bool have_mesh = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string opt = args[i];
    std::optional<std::string> inline_value;
    if (const std::size_t eq = opt.find('='); opt.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = opt.substr(eq + 1);
      opt = opt.substr(0, eq);
    }
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) throw PlanUsageError(opt + " needs a value");
      return args[++i];
    };
    if (opt == "--mesh") {
      const std::string v = value();
      const std::size_t colon = v.find(':');
      a.mesh_shape = parse_ints(v.substr(0, colon), 'x', "--mesh sizes");
      if (colon != std::string::npos) a.mesh_names = split(v.substr(colon + 1), ',');
      if (!a.mesh_names.empty() && a.mesh_names.size() != a.mesh_shape.size()) {
        throw PlanUsageError("--mesh " + v + ": " + std::to_string(a.mesh_shape.size()) +
                             " sizes but " + std::to_string(a.mesh_names.size()) +
                             " names; write e.g. 2x2x2:A,B,C");
      }
      try {
        check_comm_string_names(a.mesh_names);
      } catch (const Error& e) {
        throw PlanUsageError("--mesh " + v + ": " + e.what());
      }
      std::int64_t ranks = 1;
      for (std::int64_t size : a.mesh_shape) {
        if (size < 1) {
          throw PlanUsageError("--mesh " + v + ": every dim needs at least one rank, got " +
                               std::to_string(size));
        }
        ranks = size > kMaxPlanRanks / ranks ? kMaxPlanRanks + 1 : ranks * size;
      }
      if (ranks > kMaxPlanRanks) {
        throw PlanUsageError("--mesh " + v + ": more than " + std::to_string(kMaxPlanRanks) +
                             " (2^22) ranks; meshgate plan builds the mesh's rank map as "
                             "PyTorch does and takes meshes of up to 2^22 ranks");
      }
      have_mesh = true;
    } else if (opt == "--flatten") {
      const std::string v = value();
      const std::size_t eq = v.find('=');
      a.flatten.emplace_back(split(v.substr(0, eq), ','),
                             eq == std::string::npos ? "" : v.substr(eq + 1));
    } else if (opt == "--from") {
      a.from = value();
    } else if (opt == "--to") {
      a.to = value();
    } else if (opt == "--shape") {
      a.shape = parse_ints(value(), ',', "--shape");
    } else if (opt == "--dtype") {
      a.dtype = value();
    } else if (opt == "--coord") {
      a.coordinate = parse_ints(value(), ',', "--coord");
    } else if (opt == "--no-optimize") {
      a.options.optimize = false;
    } else if (opt == "--planner") {
      a.options.planner = parse_planner(value());
    } else if (opt == "--api") {
      a.options.api = parse_api(value());
    } else if (opt == "--ranks-per-node") {
      a.options.topology.ranks_per_node = parse_int(value(), "--ranks-per-node");
      if (a.options.topology.ranks_per_node < 1)
        throw PlanUsageError("--ranks-per-node " +
                             std::to_string(a.options.topology.ranks_per_node) +
                             ": a node holds at least one rank");
    } else if (opt == "--json") {
      a.json = true;
    } else {
      throw PlanUsageError("unknown option '" + args[i] + "'");
    }
  }
  if (!have_mesh) throw PlanUsageError("--mesh is required, e.g. --mesh 2x2x2:A,B,C");
  if (a.from.empty() || a.to.empty()) throw PlanUsageError("--from and --to are required");
  if (!a.flatten.empty() && a.mesh_names.empty()) {
    // DeviceMesh slices dims by name only ("Cannot slice a DeviceMesh without mesh_dim_names").
    throw PlanUsageError("--flatten needs a mesh with dim names: write --mesh " +
                         join(a.mesh_shape, "x") + ":" + example_names(a.mesh_shape.size()));
  }
  element_size(a.dtype);
  return a;
}

std::string bracket(std::span<const std::int64_t> v) {
  return "[" + join(v) + "]";
}

std::string human_time(double seconds) {
  char buf[32];
  if (seconds < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.2f us", seconds * 1e6);
  } else if (seconds < 1) {
    std::snprintf(buf, sizeof buf, "%.3f ms", seconds * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.3f s", seconds);
  }
  return buf;
}

std::string dims_names(const DeviceMesh& mesh, const std::vector<std::int64_t>& dims) {
  std::string s;
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + comm_dim_name(mesh, dims[i]);
  return s;
}

double sum_cost(std::span<const TransformStep> steps) {
  double t = 0;
  for (const TransformStep& s : steps) t += s.modeled_time;
  return t;
}

// Why the merge pass did what it did with a run, in words.
std::string explain(const RunDecision& r, const Plan& plan, const DeviceMesh& mesh) {
  const std::string dims = dims_names(mesh, r.mesh_dims);
  const TransformStep& first = plan.unmerged[r.steps.front()];
  switch (r.reason) {
    case MergeReason::merged: {
      std::vector<std::int64_t> sorted = r.mesh_dims;
      std::sort(sorted.begin(), sorted.end());
      return "merged: the root's flattened dim '" + r.flattened_name +
             "' has the layout of mesh dims " + dims_names(mesh, sorted);
    }
    case MergeReason::too_few_transforms:
      return "a single transform: nothing to merge";
    case MergeReason::non_ascending_mesh_dims:
      return std::string("not merged (non_ascending_mesh_dims): ") +
             (r.kind == StepKind::reduce_scatter
                  ? "reduce_scatter mesh dims must be ascending"
                  : "all_gather mesh dims must be descending (ascending shard order)") +
             ", they run as " + dims;
    case MergeReason::no_flattened_mesh: {
      std::vector<std::int64_t> sorted = r.mesh_dims;
      std::sort(sorted.begin(), sorted.end());
      if (mesh.names().empty()) {
        // The lookup needs dim names (the reference returns None without them), and so does
        // --flatten, which slices by name.
        const std::vector<std::string> names = split(example_names(mesh.ndim()), ',');
        std::string flatten;
        for (std::int64_t d : sorted) {
          flatten += (flatten.empty() ? "" : ",") + names[static_cast<std::size_t>(d)];
        }
        return "not merged (no_flattened_mesh): the mesh has no dim names, and only a named "
               "mesh has flattened dims; name them and register one, e.g. --mesh " +
               join(mesh.shape(), "x") + ":" + example_names(mesh.ndim()) + " --flatten " + flatten;
      }
      return "not merged (no_flattened_mesh): no flattened dim on the root has the layout of " +
             dims_names(mesh, sorted) + "; register one with --flatten " + dims_names(mesh, sorted);
    }
    case MergeReason::uneven_tensor_shape: {
      const std::int64_t d =
          r.kind == StepKind::all_gather ? first.src_tensor_dim : first.dst_tensor_dim;
      const auto dim = static_cast<std::size_t>(d);
      std::int64_t n = 1;
      std::int64_t largest = 0;
      for (std::size_t k : r.steps) {
        n *= plan.unmerged[k].group_size;
        largest = std::max(largest, plan.unmerged[k].logical_shape[dim]);
      }
      const std::string head =
          "not merged (uneven_tensor_shape): tensor dim " + std::to_string(d) + " of size ";
      if (r.kind == StepKind::all_gather) {
        return head + std::to_string(largest) + " splits differently over " + dims +
               " one dim at a time than over their " + std::to_string(n) +
               " ranks at once, so a flat all_gather would move elements to other ranks "
               "(PyTorch #194457)";
      }
      if (largest % n != 0) {
        return head + std::to_string(largest) + " does not divide by the " + std::to_string(n) +
               " ranks of " + dims + " (the reference's rule for reduce_scatter)";
      }
      return head + std::to_string(largest) + " divides by the " + std::to_string(n) +
             " ranks of " + dims + ", but the " + std::to_string(first.input_shape[dim]) +
             " an earlier step left on this rank split differently over them one dim at a time "
             "than at once, so a flat reduce_scatter would move elements to other ranks";
    }
    case MergeReason::optimization_disabled:
      return "not merged: the merge pass is off (--no-optimize or the kill switch)";
  }
  return "";
}

void print_steps(std::ostream& out, std::span<const TransformStep> steps,
                 const DeviceMesh& mesh) {
  if (steps.empty()) {
    out << "  (none: the placements are equal)\n";
    return;
  }
  std::size_t width = 0;
  for (const TransformStep& s : steps) width = std::max(width, to_string(s, mesh).size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const TransformStep& s = steps[i];
    std::string text = to_string(s, mesh);
    text.resize(width, ' ');
    out << "  " << i + 1 << ". " << text << "  " << to_string(s.src) << "->" << to_string(s.dst)
        << "  group " << s.group_size << "  logical " << bracket(s.logical_shape) << "  local "
        << bracket(s.input_shape) << "->" << bracket(s.output_shape);
    if (is_collective(s.kind)) {
      out << "  " << format_byte_size(static_cast<double>(s.bytes)) << "  "
          << human_time(s.modeled_time);
    }
    if (s.group_size == 1) out << "  (size-1 group: skipped)";
    if (s.avg_scale > 1) out << "  then divide by " << s.avg_scale;
    if (!s.flattened_name.empty()) out << "  on '" << s.flattened_name << "'";
    out << '\n';
  }
}

nlohmann::ordered_json step_json(const TransformStep& s, const DeviceMesh& mesh) {
  nlohmann::ordered_json j;
  j["op"] = to_string(s, mesh);
  j["kind"] = to_string(s.kind);
  j["mesh_dims"] = s.mesh_dims;
  j["src"] = to_string(s.src);
  j["dst"] = to_string(s.dst);
  j["group_size"] = s.group_size;
  j["logical_shape"] = s.logical_shape;
  j["input_shape"] = s.input_shape;
  j["output_shape"] = s.output_shape;
  j["bytes"] = s.bytes;
  j["modeled_time_s"] = s.modeled_time;
  j["avg_scale"] = s.avg_scale;
  if (!s.flattened_name.empty()) j["flattened"] = s.flattened_name;
  return j;
}

int run_plan(const PlanArgs& a, std::ostream& out) {
  const DeviceMesh mesh = DeviceMesh::create(a.mesh_shape, a.mesh_names);
  for (const auto& [dims, name] : a.flatten) {
    mesh.slice(dims).flatten(name.empty() ? std::nullopt : std::optional<std::string>(name));
  }
  const std::int64_t es = element_size(a.dtype);
  const DTensorSpec src = DTensorSpec::create(mesh, parse_placements(a.from), a.shape, es);
  const DTensorSpec dst = DTensorSpec::create(mesh, parse_placements(a.to), a.shape, es);
  std::vector<std::int64_t> coord = a.coordinate;
  if (coord.empty()) coord.assign(mesh.ndim(), 0);
  const Plan plan = plan_redistribute(src, dst, coord, a.options);
  const double unmerged_cost = sum_cost(plan.unmerged);

  if (a.json) {
    nlohmann::ordered_json j;
    j["schema"] = "meshgate.plan/1";
    j["mesh"] = {{"shape", a.mesh_shape},
                 {"names", a.mesh_names},
                 {"ranks", mesh.size()},
                 {"layout", to_string(mesh.layout())}};
    nlohmann::ordered_json flats = nlohmann::ordered_json::array();
    for (const auto& [name, layout] : mesh.flattened()) {
      flats.push_back({{"name", name}, {"layout", to_string(layout)}});
    }
    j["flattened"] = flats;
    j["from"] = to_string(src.placements);
    j["to"] = to_string(dst.placements);
    j["shape"] = a.shape;
    j["dtype"] = a.dtype;
    j["coordinate"] = coord;
    j["optimize"] = a.options.optimize;
    j["planner"] = to_string(a.options.planner);
    j["api"] = to_string(a.options.api);
    auto steps_json = [&](std::span<const TransformStep> steps) {
      nlohmann::ordered_json arr = nlohmann::ordered_json::array();
      for (const TransformStep& s : steps) arr.push_back(step_json(s, mesh));
      return arr;
    };
    j["unmerged"] = steps_json(plan.unmerged);
    nlohmann::ordered_json runs = nlohmann::ordered_json::array();
    for (const RunDecision& r : plan.runs) {
      runs.push_back({{"kind", to_string(r.kind)},
                      {"mesh_dims", r.mesh_dims},
                      {"steps", r.steps},
                      {"reason", to_string(r.reason)},
                      {"flattened", r.flattened_name},
                      {"explanation", explain(r, plan, mesh)}});
    }
    j["runs"] = runs;
    j["steps"] = steps_json(plan.steps);
    j["comms"] = comm_strings(plan.steps, mesh);
    nlohmann::ordered_json warnings = nlohmann::ordered_json::array();
    for (const PlanWarning& w : plan.warnings) {
      warnings.push_back(
          {{"mesh_dims", w.mesh_dims}, {"reason", to_string(w.reason)}, {"message", w.message}});
    }
    j["warnings"] = warnings;
    j["cost_s"] = plan.cost;
    j["greedy_cost_s"] = plan.greedy_cost;
    j["unmerged_cost_s"] = unmerged_cost;
    out << j.dump(1) << '\n';
    return 0;
  }

  out << "redistribute " << to_string(src.placements) << " -> " << to_string(dst.placements)
      << '\n';
  out << "mesh " << join(a.mesh_shape, "x");
  if (!a.mesh_names.empty()) {
    out << " (";
    for (std::size_t i = 0; i < a.mesh_names.size(); ++i) out << (i ? ", " : "") << a.mesh_names[i];
    out << ")";
  }
  out << ", " << mesh.size() << " ranks, layout " << to_string(mesh.layout()) << '\n';
  out << "flattened dims on the root:";
  if (mesh.flattened().empty()) out << " none";
  for (const auto& [name, layout] : mesh.flattened())
    out << ' ' << name << " = " << to_string(layout);
  out << '\n';
  out << "tensor " << bracket(a.shape) << ' ' << a.dtype << "; rank coordinate " << bracket(coord)
      << "; planner " << to_string(a.options.planner) << "; api " << to_string(a.options.api)
      << "; merge pass " << (a.options.optimize ? "on" : "off (--no-optimize)") << '\n';
  out << "topology: " << a.options.topology.ranks_per_node << " ranks per node\n\n";

  out << "before the merge pass (greedy transforms):\n";
  print_steps(out, plan.unmerged, mesh);
  out << "\nmerge pass:\n";
  if (plan.runs.empty()) {
    out << "  no all_reduce / reduce_scatter / all_gather runs to consider"
        << (plan.unmerged.size() < 2 ? " (fewer than 2 transforms)" : "") << '\n';
  }
  for (const RunDecision& r : plan.runs) {
    out << "  " << to_string(r.kind) << " run on " << dims_names(mesh, r.mesh_dims) << " (step";
    out << (r.steps.size() > 1 ? "s " : " ");
    for (std::size_t k = 0; k < r.steps.size(); ++k) out << (k ? "," : "") << r.steps[k] + 1;
    out << "): " << explain(r, plan, mesh) << '\n';
  }
  out << "\nafter the merge pass"
      << (a.options.planner == Planner::min_cost ? " and min_cost search" : "") << ":\n";
  print_steps(out, plan.steps, mesh);
  out << "\ncollectives issued:";
  const std::vector<std::string> comms = comm_strings(plan.steps, mesh);
  if (comms.empty()) out << " none";
  for (const std::string& c : comms) out << ' ' << c << (&c == &comms.back() ? "" : ",");
  out << "\nwarnings:";
  if (plan.warnings.empty()) out << " none";
  out << '\n';
  for (const PlanWarning& w : plan.warnings) {
    out << "  [" << to_string(w.reason) << "] " << w.message << '\n';
  }
  out << "modeled cost: " << human_time(plan.cost) << " (greedy " << human_time(plan.greedy_cost)
      << ", unmerged " << human_time(unmerged_cost) << ")\n";
  return 0;
}

}  // namespace

std::string plan_usage_text() {
  return "usage: meshgate-plan --mesh 2x2x2:A,B,C [--flatten A,C[=name]]... \\\n"
         "         --from \"P(sum),R,P(sum)\" --to \"R,R,R\" [--shape 1024,1024] \\\n"
         "         [--dtype float32] [--coord 0,0,0] [--no-optimize] [--planner greedy|min_cost]\n"
         "         [--api internal|public] [--ranks-per-node 8] [--json]\n"
         "Explains a redistribution without running it: the greedy transforms, the merge\n"
         "pass's decision for each run, warnings, bytes and modeled cost per step. The rank\n"
         "coordinate (default all zeros) sets the logical shapes of uneven shards.\n";
}

int plan_command(std::span<const std::string> args, std::ostream& out, std::ostream& err) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      out << plan_usage_text();
      return 0;
    }
  }
  PlanArgs parsed;
  try {
    parsed = parse_args(args);
  } catch (const PlanUsageError& e) {
    err << "meshgate-plan: " << e.what() << "\n\n" << plan_usage_text();
    return 2;
  } catch (const Error& e) {
    err << "meshgate-plan: " << e.what() << "\n\n" << plan_usage_text();
    return 2;
  }
  try {
    return run_plan(parsed, out);
  } catch (const Error& e) {
    err << "meshgate-plan: " << e.what() << '\n';
    return 2;
  } catch (const std::bad_alloc&) {
    err << "meshgate-plan: ran out of memory planning on a mesh of " << join(parsed.mesh_shape, "x")
        << ": plan a smaller mesh\n";
    return 2;
  } catch (const std::exception& e) {
    err << "meshgate-plan: " << e.what() << '\n';
    return 2;
  }
}

}  // namespace meshgate::runner

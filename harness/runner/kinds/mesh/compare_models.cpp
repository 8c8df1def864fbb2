// compare_models: the case under both layout models, every observable difference recorded and
// classified.

#include "kinds/mesh/mesh_case.hpp"

namespace meshgate::runner::mesh_kind {

// What user code sees of the result's function: ranks, groups, coordinates, views, submeshes.
// A difference here is a semantic change.
nlohmann::json observe_function(const Executed& e) {
  const DeviceMesh& m = e.mesh;
  nlohmann::json coordinates = nlohmann::json::object();
  nlohmann::json views = nlohmann::json::object();
  for (std::int64_t rank : m.rank_map()) {
    const std::string key = std::to_string(rank);
    const auto c = m.coordinate(rank);
    coordinates[key] = c ? nlohmann::json(*c) : nlohmann::json();
    try {
      views[key] = rank_tensor_to_json(m.mesh_for_rank(rank));
    } catch (const meshgate::Error& err) {
      views[key] = std::string("rejected: ") + python_name(err.kind()).data();
    }
  }
  nlohmann::json out = {{"shape", m.shape()},      {"names", m.names()},
                        {"groups", all_groups(m)}, {"coordinates", coordinates},
                        {"mesh_for_rank", views},  {"flatten decisions", e.flatten_decisions}};
  if (e.submeshes) {
    nlohmann::json rows = nlohmann::json::array();
    nlohmann::json shapes = nlohmann::json::array();
    for (const DeviceMesh& s : *e.submeshes) {
      rows.push_back(mesh_ranks(s));
      shapes.push_back(s.shape());
    }
    out["_get_all_submeshes rows"] = rows;
    out["_get_all_submeshes shapes"] = shapes;
  }
  return out;
}

// How the model writes the result: each dim's layout as `mesh._layout[d]` hands it to user code
// (text, int shape or tuple, len), and == / hash against the case's `equal_to` mesh. A
// difference here with the same function is a representation change.
nlohmann::json observe_representation(const Executed& e,
                                      const std::optional<DeviceMesh>& equal_to) {
  const DeviceMesh& m = e.mesh;
  nlohmann::json dims = nlohmann::json::array();
  for (std::size_t d = 0; d < m.ndim(); ++d) {
    const Layout dim = mesh_mode(m.layout(), static_cast<std::int64_t>(d));
    const std::string form = dim.shape().is_int() ? "int shape" : "tuple shape";
    // _FlatLayout.__len__ raises: "You should never need to know the length..."
    const std::string length = m.model() == LayoutModel::one_level
                                   ? "len " + std::to_string(dim.rank())
                                   : "len raises RuntimeError";
    dims.push_back(to_string(dim) + " (" + form + ", " + length + ")");
  }
  nlohmann::json out = {{"mesh._layout", dims}};
  if (equal_to) {
    // DeviceMesh hashes what == compares, so a dict or cache keyed by meshes sees the same.
    out["== / hash with equal_to"] = e.mesh == *equal_to;
  }
  return out;
}

namespace {

// Every observable of `x` that `y` shows otherwise, as a disagreement of class `change`, naming
// the first differing rank (per-rank maps) or index (per-dim and per-row lists).
void add_differences(ChangeClass change, const nlohmann::json& x, const nlohmann::json& y,
                     std::vector<Disagreement>& differences) {
  const auto text = [](const nlohmann::json& v) {
    return shorten(v.is_string() ? v.get<std::string>() : v.dump());
  };
  for (const auto& [key, mine] : x.items()) {
    const nlohmann::json theirs = y.contains(key) ? y[key] : nlohmann::json();
    if (theirs == mine) continue;
    std::string where;
    nlohmann::json a = mine;
    nlohmann::json b = theirs;
    if (mine.is_object() && theirs.is_object()) {
      for (const auto& [rank, v] : mine.items()) {
        if (theirs.contains(rank) && theirs[rank] == v) continue;
        where = " of rank " + rank;
        a = v;
        b = theirs.contains(rank) ? theirs[rank] : nlohmann::json();
        break;
      }
    } else if (mine.is_array() && theirs.is_array() && mine.size() == theirs.size()) {
      for (std::size_t i = 0; i < mine.size(); ++i) {
        if (mine[i] == theirs[i]) continue;
        where = "[" + std::to_string(i) + "]";
        a = mine[i];
        b = theirs[i];
        break;
      }
    }
    differences.push_back({change, key + where, text(a), text(b)});
  }
}

}  // namespace

std::vector<Disagreement> MeshCase::compare_models_on(const std::optional<Executed>& primary,
                                            const std::exception_ptr& primary_error) const {
  const LayoutModel other_model =
      model == LayoutModel::one_level ? LayoutModel::two_level : LayoutModel::one_level;
  std::optional<Executed> other;
  std::string other_error;
  try {
    other = execute(other_model);
  } catch (const meshgate::Error& err) {
    other_error = err.what();
  }
  const std::string primary_error_text = primary ? "" : rejection_message(primary_error);
  const bool one_is_primary = model == LayoutModel::one_level;
  const std::optional<Executed>& one = one_is_primary ? primary : other;
  const std::optional<Executed>& two = one_is_primary ? other : primary;
  const std::string& one_error = one_is_primary ? primary_error_text : other_error;
  const std::string& two_error = one_is_primary ? other_error : primary_error_text;

  if (!one && !two) {
    if (error_type(one_error) == error_type(two_error)) return {};
    // Code that catches the one_level exception type no longer catches the new one.
    return {{ChangeClass::semantic_change, "error type", shorten(one_error), shorten(two_error)}};
  }
  if (!one) {
    return {
        {ChangeClass::relaxation, "configuration", "rejects: " + shorten(one_error), "accepts"}};
  }
  if (!two) {
    return {{ChangeClass::new_rejection, "configuration", "accepts",
             "rejects: " + shorten(two_error)}};
  }

  std::vector<Disagreement> differences;
  add_differences(ChangeClass::semantic_change, observe_function(*one), observe_function(*two),
                  differences);
  const std::optional<DeviceMesh> one_target =
      equal_to ? std::optional(equal_to->build(LayoutModel::one_level, current_rank))
               : std::nullopt;
  const std::optional<DeviceMesh> two_target =
      equal_to ? std::optional(equal_to->build(LayoutModel::two_level, current_rank))
               : std::nullopt;
  add_differences(ChangeClass::representation_change, observe_representation(*one, one_target),
                  observe_representation(*two, two_target), differences);
  // #172343 replaces the set-based overlap check with check_orthogonal on the 2-level
  // layouts: a mesh one_level builds, such as (2,2):(3,1), is then rejected at creation.
  if (!check_orthogonal(two->mesh.layout())) {
    differences.push_back({ChangeClass::new_rejection, "check_orthogonal of #172343",
                           "accepts (set-based non-overlap check)",
                           "rejects " + to_string(two->mesh.layout()) + " at creation"});
  }
  return differences;
}

void MeshCase::check_model_differences(const std::vector<Disagreement>& differences,
                             std::vector<std::string>& mismatches) const {
  std::vector<ChangeClass> found;
  for (const Disagreement& d : differences) {
    if (std::find(found.begin(), found.end(), d.change) == found.end()) found.push_back(d.change);
  }
  std::sort(found.begin(), found.end());
  auto names = [](const std::vector<ChangeClass>& classes) {
    std::string out = "[";
    for (ChangeClass c : classes)
      out += (out.size() > 1 ? ", " : "") + std::string(kChangeClassNames[static_cast<int>(c)]);
    return out + "]";
  };
  auto listing = [&] {
    std::vector<std::string> parts;
    for (const Disagreement& d : differences) {
      parts.push_back(std::string(kChangeClassNames[static_cast<int>(d.change)]) + " " +
                      d.observable + ": one_level " + d.one_level + " vs two_level " +
                      d.two_level);
    }
    return join(parts);
  };
  if (model_differences) {
    if (found != *model_differences) {
      mismatches.push_back("model_differences: expected " + names(*model_differences) +
                           ", found " + names(found) +
                           (differences.empty() ? "" : " (" + listing() + ")"));
    }
  } else if (models_agree && !*models_agree && differences.empty()) {
    mismatches.push_back(
        "expected the layout models to disagree (models_agree: false), but they agree on "
        "everything compared");
  } else if ((!models_agree || *models_agree) && !differences.empty()) {
    mismatches.push_back("the layout models disagree: " + listing());
  }
}

}  // namespace meshgate::runner::mesh_kind

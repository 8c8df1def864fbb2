// The mesh kind on meshgate's DeviceMesh: the ops in order, the observables of the result, the
// timed op sequence.

#include "kinds/mesh/mesh_case.hpp"

namespace meshgate::runner::mesh_kind {

Outcome MeshCase::run(RunContext&) {
  std::optional<Executed> primary;
  std::exception_ptr primary_error;
  try {
    primary = execute(model);
  } catch (const meshgate::Error&) {
    primary_error = std::current_exception();
  }

  Outcome outcome;
  std::vector<std::string> mismatches;
  if (compare_models) {
    const std::vector<Disagreement> differences = compare_models_on(primary, primary_error);
    nlohmann::json listed = nlohmann::json::array();
    for (const Disagreement& d : differences) listed.push_back(d.to_json());
    outcome.metrics["model_disagreements"] = listed;
    check_model_differences(differences, mismatches);
  }
  if (primary_error) {
    // The primary model rejected the case: the runner judges that against expect_error and
    // keeps the model comparison.
    if (mismatches.empty()) {
      outcome.rejection = rejection_message(primary_error);
      return outcome;
    }
    outcome.status = Status::fail;
    outcome.message = join(mismatches) + "; and " + to_string_model() +
                      " rejected the case: " + rejection_message(primary_error);
    return outcome;
  }
  return judge(observe(*primary), std::move(outcome), std::move(mismatches));
}

double MeshCase::time_calls(RunContext&, std::int64_t calls) {
  const double start = monotonic_seconds();
  for (std::int64_t i = 0; i < calls; ++i) keep_result(execute(model));
  return monotonic_seconds() - start;
}

LayoutModel MeshCase::other_model() const {
  return model == LayoutModel::one_level ? LayoutModel::two_level : LayoutModel::one_level;
}

bool MeshCase::ends_in_submeshes() const {
  return !ops.empty() && std::holds_alternative<SubmeshesOp>(ops.back());
}

std::optional<Observed> MeshCase::observe_model(LayoutModel which, std::string& error,
                                      bool orthogonal) const {
  std::optional<Executed> e;
  try {
    e = execute(which, orthogonal);
  } catch (const meshgate::Error& err) {
    error = err.what();
    return std::nullopt;
  }
  const DeviceMesh& m = e->mesh;
  Observed o;
  o.layout = m.layout();
  o.shape = m.shape();
  o.names = m.names();
  o.groups = all_groups(m);
  for (const auto& [rank, expected] : expect.coordinates) {
    const auto c = m.coordinate(rank);
    o.coordinates[rank] = c ? nlohmann::json(*c) : nlohmann::json();
  }
  for (const auto& [rank, expected] : expect.mesh_for_rank) {
    try {
      o.mesh_for_rank[rank] = rank_tensor_to_json(m.mesh_for_rank(rank));
    } catch (const meshgate::Error& err) {
      o.mesh_for_rank[rank] = std::string("rejected: ") + err.what();
    }
  }
  if (e->submeshes) {
    o.submeshes = nlohmann::json::array();
    for (const DeviceMesh& s : *e->submeshes) o.submeshes->push_back(mesh_ranks(s));
  }
  return o;
}

std::string MeshCase::rejection_message(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

DeviceMesh MeshCase::flatten_on(const DeviceMesh& m, const FlattenSpec& f,
                             std::vector<std::string>& decisions) {
  const DeviceMesh source = f.dims ? m.slice(*f.dims) : m;
  std::vector<std::string> registered;
  for (const auto& [name, layout] : source.flattened()) registered.push_back(name);
  DeviceMesh flat = source.flatten(f.name);
  const std::string& name = flat.names().front();
  if (flat == source && source.ndim() == 1 && source.names().front() == name) {
    decisions.push_back("itself " + name);
  } else if (std::find(registered.begin(), registered.end(), name) != registered.end()) {
    decisions.push_back("reused " + name);
  } else {
    decisions.push_back("registered " + name);
  }
  return flat;
}

void MeshCase::check_orthogonal_creation(const Layout& layout) {
  if (!check_orthogonal(layout)) {
    throw meshgate::Error(ErrorKind::assertion,
                          "Please use a non-overlapping layout when creating a DeviceMesh. "
                          "(check_orthogonal of PR #172343 rejects " +
                              to_string(layout) + ")");
  }
}

Executed MeshCase::execute(LayoutModel which, bool orthogonal) const {
  if (orthogonal && mesh.layout) check_orthogonal_creation(*mesh.layout);
  DeviceMesh root = mesh.build(which, current_rank);
  const auto created = [&](const DeviceMesh& m) {
    if (orthogonal) check_orthogonal_creation(m.layout());
    return m;
  };
  Executed e{root, std::nullopt, {}};
  for (const FlattenSpec& f : root_flattens) created(flatten_on(root, f, e.flatten_decisions));
  for (const Op& op : ops) {
    if (const auto* s = std::get_if<SliceOp>(&op)) {
      e.mesh = created(e.mesh.slice(s->names));
    } else if (const auto* f = std::get_if<FlattenSpec>(&op)) {
      e.mesh = created(flatten_on(e.mesh, *f, e.flatten_decisions));
    } else if (const auto* u = std::get_if<UnflattenOp>(&op)) {
      e.mesh = created(e.mesh.unflatten(u->dim, u->sizes, u->names));
    } else if (const auto* sub = std::get_if<SubmeshesOp>(&op)) {
      e.submeshes = e.mesh.submeshes(sub->dim);
    } else if (const auto* c = std::get_if<ConcatenateOp>(&op)) {
      std::vector<DeviceMesh> parts;
      for (const auto& names : c->parts) parts.push_back(created(e.mesh.slice(names)));
      e.mesh = created(DeviceMesh::concatenate(parts));
    }
  }
  return e;
}

Observed MeshCase::observe(const Executed& e) const {
  const DeviceMesh& m = e.mesh;
  Observed o;
  o.layout = m.layout();
  o.shape = m.shape();
  o.names = m.names();
  if (expect.groups) o.groups = all_groups(m);
  for (const auto& [rank, expected] : expect.coordinates) {
    const auto c = m.coordinate(rank);
    o.coordinates[rank] = c ? nlohmann::json(*c) : nlohmann::json();
  }
  for (const auto& [rank, expected] : expect.mesh_for_rank)
    o.mesh_for_rank[rank] = rank_tensor_to_json(m.mesh_for_rank(rank));
  if (expect.submeshes && e.submeshes) {
    o.submeshes = nlohmann::json::array();
    for (const DeviceMesh& s : *e.submeshes) o.submeshes->push_back(mesh_ranks(s));
  }
  if (expect.warnings) o.warnings = m.warnings();
  return o;
}

}  // namespace meshgate::runner::mesh_kind

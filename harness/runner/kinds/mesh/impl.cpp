// The mesh kind handed to another implementation (docs/impl-protocol.md): the request, and the
// observables it answers.

#include "kinds/mesh/mesh_case.hpp"

namespace meshgate::runner::mesh_kind {

std::optional<nlohmann::json> MeshCase::impl_request(const std::filesystem::path&,
                                           std::string& why) {
  // The case's own model, and the other one where meshgate's two models leave something of
  // the case to judge: an implementation of a model not listed answers unsupported.
  const Judging& own = judging(model);
  if (!own.why_not.empty()) {
    why = own.why_not;
    return std::nullopt;
  }
  const LayoutModel other = other_model();
  const Judging& theirs = judging(other);
  nlohmann::json models = nlohmann::json::array({to_string(model)});
  nlohmann::json unjudged = nlohmann::json::object();
  if (theirs.why_not.empty()) {
    models.push_back(to_string(other));
  } else {
    unjudged[std::string(to_string(other))] = theirs.why_not;
  }
  std::vector<std::int64_t> ranks = mesh.ranks;
  if (ranks.empty()) {
    const std::int64_t count =
        mesh.shape ? std::accumulate(mesh.shape->begin(), mesh.shape->end(), std::int64_t{1},
                                     std::multiplies<>())
                   : DeviceMesh::default_rank_count(*mesh.layout);
    ranks.resize(static_cast<std::size_t>(count));
    std::iota(ranks.begin(), ranks.end(), std::int64_t{0});
  }
  const auto flatten_json = [](const FlattenSpec& f) {
    return nlohmann::json{{"dims", f.dims ? nlohmann::json(*f.dims) : nlohmann::json()},
                          {"name", f.name ? nlohmann::json(*f.name) : nlohmann::json()}};
  };
  nlohmann::json flattens = nlohmann::json::array();
  for (const FlattenSpec& f : root_flattens) flattens.push_back(flatten_json(f));
  nlohmann::json op_list = nlohmann::json::array();
  for (const Op& op : ops) {
    if (const auto* s = std::get_if<SliceOp>(&op)) {
      op_list.push_back({{"slice", s->names}});
    } else if (const auto* f = std::get_if<FlattenSpec>(&op)) {
      op_list.push_back({{"flatten", flatten_json(*f)}});
    } else if (const auto* u = std::get_if<UnflattenOp>(&op)) {
      const nlohmann::json dim = std::holds_alternative<std::int64_t>(u->dim)
                                     ? nlohmann::json(std::get<std::int64_t>(u->dim))
                                     : nlohmann::json(std::get<std::string>(u->dim));
      op_list.push_back(
          {{"unflatten", {{"dim", dim}, {"sizes", u->sizes}, {"names", u->names}}}});
    } else if (const auto* sub = std::get_if<SubmeshesOp>(&op)) {
      op_list.push_back({{"submeshes", sub->dim}});
    } else if (const auto* c = std::get_if<ConcatenateOp>(&op)) {
      op_list.push_back({{"concatenate", c->parts}});
    }
  }
  nlohmann::json coordinate_ranks = nlohmann::json::array();
  for (const auto& [rank, expected] : expect.coordinates) coordinate_ranks.push_back(rank);
  nlohmann::json view_ranks = nlohmann::json::array();
  for (const auto& [rank, expected] : expect.mesh_for_rank) view_ranks.push_back(rank);
  return nlohmann::json{
      {"mesh",
       {{"shape", mesh.shape ? nlohmann::json(*mesh.shape) : nlohmann::json()},
        {"names", mesh.names.empty() ? nlohmann::json() : nlohmann::json(mesh.names)},
        {"layout", mesh.layout ? nlohmann::json(to_string(*mesh.layout)) : nlohmann::json()},
        {"ranks", ranks}}},
      {"model", to_string(model)},
      {"models", models},
      {"unjudged_models", unjudged},
      {"flatten", flattens},
      {"ops", op_list},
      {"rank", current_rank ? nlohmann::json(*current_rank) : nlohmann::json()},
      {"observe",
       {{"coordinates", coordinate_ranks},
        {"mesh_for_rank", view_ranks},
        {"submeshes",
         expect.submeshes.has_value() || (compare_models && ends_in_submeshes())}}}};
}

Outcome MeshCase::check_observables(const nlohmann::json& observables,
                          const std::filesystem::path&) {
  LayoutModel answered = model;
  if (observables.is_object() && observables.contains("model")) {
    const nlohmann::json& v = observables["model"];
    std::optional<LayoutModel> parsed;
    try {
      if (v.is_string()) parsed = parse_layout_model(v.get<std::string>());
    } catch (const meshgate::Error&) {
    }
    if (!parsed) {
      throw ImplFailure("answered 'model' " + shorten(v.dump()) +
                        ", which is not one_level or two_level");
    }
    answered = *parsed;
  }
  const Judging& j = judging(answered);
  if (!j.why_not.empty()) {
    throw ImplFailure("answered the observables of the " + std::string(to_string(answered)) +
                      " layout model, which the request does not list in 'models': " +
                      j.why_not);
  }
  const auto needs = [&](const std::string& name) {
    return std::find(j.against_meshgate.begin(), j.against_meshgate.end(), name) !=
           j.against_meshgate.end();
  };
  return judge_answer(read_observed(observables, needs("groups"), needs("submeshes")), j,
                      answered);
}

std::vector<ObservableRef> MeshCase::observable_refs(bool all) const {
  std::vector<ObservableRef> out;
  if (all || expect.layout)
    out.push_back(
        {"layout", [](const Observed& o) { return nlohmann::json(to_string(o.layout)); }});
  if (all || expect.shape)
    out.push_back({"shape", [](const Observed& o) { return nlohmann::json(o.shape); }});
  if (all || expect.names)
    out.push_back({"names", [](const Observed& o) { return nlohmann::json(o.names); }});
  if (all || expect.groups) {
    out.push_back(
        {"groups", [](const Observed& o) { return o.groups.value_or(nlohmann::json()); }});
  }
  const auto at = [](const std::map<std::int64_t, nlohmann::json>& by_rank, std::int64_t rank) {
    const auto it = by_rank.find(rank);
    return it == by_rank.end() ? nlohmann::json() : it->second;
  };
  // The ranks are copied out of the map entries: clang 14 (the fuzz preset) cannot capture a
  // structured binding.
  for (const auto& entry : expect.coordinates) {
    const std::int64_t rank = entry.first;
    out.push_back({"coordinates of rank " + std::to_string(rank),
                   [rank, at](const Observed& o) { return at(o.coordinates, rank); }});
  }
  for (const auto& entry : expect.mesh_for_rank) {
    const std::int64_t rank = entry.first;
    out.push_back({"mesh_for_rank of rank " + std::to_string(rank),
                   [rank, at](const Observed& o) { return at(o.mesh_for_rank, rank); }});
  }
  if (expect.submeshes || (all && ends_in_submeshes())) {
    out.push_back(
        {"submeshes", [](const Observed& o) { return o.submeshes.value_or(nlohmann::json()); }});
  }
  return out;
}

Observed MeshCase::read_observed(const nlohmann::json& obs, bool need_groups,
                       bool need_submeshes) const {
  if (!obs.is_object())
    throw ImplFailure("answered mesh observables that are not an object: " + shorten(obs.dump()));
  const auto get = [&](const std::string& key, bool needed) -> const nlohmann::json* {
    if (obs.contains(key)) return &obs[key];
    if (needed) throw ImplFailure("answered no '" + key + "' observable, which the case expects");
    return nullptr;
  };
  const auto wrong = [&](const std::string& key, const nlohmann::json& value,
                         const std::string& wanted) {
    return ImplFailure("answered '" + key + "' " + shorten(value.dump()) + ", which is not " +
                       wanted);
  };
  Observed o;
  const nlohmann::json& layout = *get("layout", true);
  if (!layout.is_string()) throw wrong("layout", layout, "a layout in CuTe notation");
  try {
    o.layout = parse_layout(layout.get<std::string>());
  } catch (const meshgate::Error& err) {
    throw wrong("layout", layout, std::string("a layout in CuTe notation (") + err.what() + ")");
  }
  const nlohmann::json& shape = *get("shape", true);
  if (!ints_at_depth(shape, 1)) throw wrong("shape", shape, "a list of ints");
  o.shape = shape.get<std::vector<std::int64_t>>();
  if (const nlohmann::json* names = get("names", expect.names.has_value());
      names && !names->is_null()) {
    if (!names->is_array() ||
        !std::all_of(names->begin(), names->end(), [](const auto& n) { return n.is_string(); }))
      throw wrong("names", *names, "a list of dim names or null");
    o.names = names->get<std::vector<std::string>>();
  }
  if (const nlohmann::json* groups = get("groups", expect.groups.has_value() || need_groups)) {
    if (!ints_at_depth(*groups, 3))
      throw wrong("groups", *groups, "one list of rank groups per dim");
    o.groups = *groups;
  }
  const auto per_rank = [&](const std::string& key,
                            const std::vector<std::pair<std::int64_t, nlohmann::json>>& asked,
                            const auto& valid, const std::string& wanted,
                            std::map<std::int64_t, nlohmann::json>& out) {
    const nlohmann::json* by_rank = get(key, !asked.empty());
    if (!by_rank) return;
    if (!by_rank->is_object()) throw wrong(key, *by_rank, "a mapping rank -> " + wanted);
    for (const auto& [rank, value] : by_rank->items()) {
      if (!valid(value)) throw wrong(key + " of rank " + rank, value, wanted);
    }
    for (const auto& [rank, expected] : asked) {
      const std::string text = std::to_string(rank);
      if (!by_rank->contains(text)) {
        throw ImplFailure("answered no '" + key + "' of rank " + text +
                          ", which the case expects");
      }
      out[rank] = (*by_rank)[text];
    }
  };
  per_rank(
      "coordinates", expect.coordinates,
      [](const nlohmann::json& v) { return v.is_null() || ints_at_depth(v, 1); },
      "a list of ints or null", o.coordinates);
  per_rank("mesh_for_rank", expect.mesh_for_rank, nested_int_lists, "a nested list of ranks",
           o.mesh_for_rank);
  if (const nlohmann::json* submeshes =
          get("submeshes", expect.submeshes.has_value() || need_submeshes);
      submeshes && !submeshes->is_null()) {
    if (!ints_at_depth(*submeshes, 2))
      throw wrong("submeshes", *submeshes, "one list of ranks per submesh");
    o.submeshes = *submeshes;
  }
  return o;
}

}  // namespace meshgate::runner::mesh_kind

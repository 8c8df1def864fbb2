// kind: mesh — build a DeviceMesh (docs/kinds.md, DeviceMesh), register flattened dims on the root,
// apply slice/flatten/unflatten/concatenate/submeshes in order, and compare the current mesh with
// `expect`. With compare_models the same configuration also runs under the other layout model and
// every observable difference is recorded and classified (new rejection, semantic change,
// representation change, relaxation, seen from one_level to two_level): the corpus that catches a
// model change such as PR #172089 before it lands.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "byte_size.hpp"
#include "case_kind.hpp"
#include "core/error.hpp"
#include "external_impl.hpp"
#include "kinds/case_values.hpp"
#include "kinds/memory_estimates.hpp"
#include "kinds/mesh_spec.hpp"
#include "mesh/device_mesh.hpp"
#include "timing.hpp"

namespace meshgate::runner {
namespace {

struct FlattenSpec {
  std::optional<std::vector<std::string>> dims;  // none: all dims of the mesh
  std::optional<std::string> name;
};

struct SliceOp {
  std::vector<std::string> names;
};
struct UnflattenOp {
  MeshDim dim;
  std::vector<std::int64_t> sizes;
  std::vector<std::string> names;
};
struct SubmeshesOp {
  std::string dim;
};
struct ConcatenateOp {
  std::vector<std::vector<std::string>> parts;
};
using Op = std::variant<SliceOp, FlattenSpec, UnflattenOp, SubmeshesOp, ConcatenateOp>;

struct Expect {
  std::optional<Layout> layout;
  std::optional<std::vector<std::int64_t>> shape;
  std::optional<std::vector<std::string>> names;
  std::optional<nlohmann::json> groups;
  std::vector<std::pair<std::int64_t, nlohmann::json>> coordinates;  // null = not in the mesh
  std::vector<std::pair<std::int64_t, nlohmann::json>> mesh_for_rank;
  std::optional<nlohmann::json> submeshes;
  std::optional<std::int64_t> warnings;
};

// The state after the ops ran: the current mesh, and the submeshes when the last op made them.
struct Executed {
  DeviceMesh mesh;
  std::optional<std::vector<DeviceMesh>> submeshes;
  // Per flatten, in order: whether it registered a new name, reused the registered mesh, or
  // returned the 1-D mesh itself. A cache keyed by layout decides the same way.
  std::vector<std::string> flatten_decisions;
};

// What the current mesh shows of the observables `expect` asks about, whoever computed it
// (meshgate's DeviceMesh, or an implementation under test through its answer): the one input of
// the check against `expect`.
struct Observed {
  Layout layout;
  std::vector<std::int64_t> shape;
  std::vector<std::string> names;                  // empty when unnamed
  std::optional<nlohmann::json> groups;            // per dim, rank groups in complement order
  std::map<std::int64_t, nlohmann::json> coordinates;    // null: the rank is in no row
  std::map<std::int64_t, nlohmann::json> mesh_for_rank;  // DeviceMesh.mesh as the rank sees it
  std::optional<nlohmann::json> submeshes;         // ranks per submesh, when a submeshes op ran
  std::optional<std::vector<std::string>> warnings;
};

// One observable of the current mesh by the name messages give it ("groups", "coordinates of
// rank 3"), and its value in an Observed as JSON (a layout as its text; null where absent), so
// that two answers can be compared observable by observable.
struct ObservableRef {
  std::string name;
  std::function<nlohmann::json(const Observed&)> value;
};

// How the answer of an implementation that computes one layout model is judged: against the
// case's `expect` where the answer cannot depend on the model (the case is written for that
// model, or meshgate's two models agree there), against meshgate's own answer for that model
// where a compare_models case compares the models, and not at all where the value depends on
// the model and the case holds no expectation for it (docs/kinds.md, "A case of the other
// layout model").
struct Judging {
  std::string why_not;                        // set: this model's answer cannot be judged, why
  bool rejection = false;                     // the rejection the case expects is judged
  std::vector<std::string> judged;            // against expect
  std::vector<std::string> against_meshgate;  // against meshgate's answer for the model
  std::vector<std::string> model_dependent;   // left out: meshgate's two models differ there
  std::vector<std::string> unobservable;      // left out: no observable of the protocol
  std::optional<Observed> reference;          // meshgate's observables under the model
};

// Whether `v` is an int, or a list of such values, exactly `depth` lists deep.
bool ints_at_depth(const nlohmann::json& v, int depth) {
  if (depth == 0) return v.is_number_integer();
  return v.is_array() && std::all_of(v.begin(), v.end(), [&](const nlohmann::json& item) {
           return ints_at_depth(item, depth - 1);
         });
}

// Whether `v` is a list nesting ints at any depth, as a rank tensor of any ndim.
bool nested_int_lists(const nlohmann::json& v) {
  return v.is_array() && std::all_of(v.begin(), v.end(), [](const nlohmann::json& item) {
           return item.is_number_integer() || nested_int_lists(item);
         });
}

// How a disagreement between the models affects users, worst first. Directions are from
// one_level (PyTorch main) to two_level (PR #172089).
enum class ChangeClass { new_rejection, semantic_change, representation_change, relaxation };
constexpr const char* kChangeClassNames[] = {"new_rejection", "semantic_change",
                                             "representation_change", "relaxation"};

std::optional<ChangeClass> parse_change_class(const std::string& text) {
  for (std::size_t i = 0; i < std::size(kChangeClassNames); ++i) {
    if (text == kChangeClassNames[i]) return static_cast<ChangeClass>(i);
  }
  return std::nullopt;
}

struct Disagreement {
  ChangeClass change;
  std::string observable;
  std::string one_level;  // what each model shows
  std::string two_level;
  nlohmann::json to_json() const {
    return {{"class", kChangeClassNames[static_cast<int>(change)]},
            {"observable", observable},
            {"one_level", one_level},
            {"two_level", two_level}};
  }
};

nlohmann::json mesh_ranks(const DeviceMesh& m) {
  nlohmann::json out = nlohmann::json::array();
  for (std::int64_t position : all_ranks_from_zero(m.layout()))
    out.push_back(m.rank_map()[position]);
  return out;
}

nlohmann::json all_groups(const DeviceMesh& m) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t d = 0; d < m.ndim(); ++d) out.push_back(m.groups(static_cast<std::int64_t>(d)));
  return out;
}

std::string shorten(std::string text, std::size_t limit = 240) {
  if (text.size() > limit) text = text.substr(0, limit) + "...";
  return text;
}

std::string error_type(const std::string& message) {
  return message.substr(0, message.find(':'));
}

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

class MeshCase final : public PreparedCase {
 public:
  MeshSpec mesh;
  LayoutModel model = LayoutModel::one_level;
  std::vector<FlattenSpec> root_flattens;
  std::vector<Op> ops;
  Expect expect;
  std::optional<std::int64_t> current_rank;  // `rank:`
  std::optional<MeshSpec> equal_to;
  bool compare_models = false;
  // What the comparison must find: `models_agree: true` (nothing), `models_agree: false`
  // (something), or `model_differences: [classes]` (exactly these classes).
  std::optional<bool> models_agree;
  std::optional<std::vector<ChangeClass>> model_differences;
  // expect_error, and its text (empty: any rejection): whether the rejection of the other
  // layout model would meet it.
  bool expects_rejection = false;
  std::string expected_message;
  nlohmann::json params_json;

  int ranks() const override { return 1; }
  nlohmann::json params() const override { return params_json; }

  // Every mesh the ops build holds its rank map and layout enumerations (about 32 B per rank);
  // comparing the models observes every rank's view of the whole mesh (n x n ranks as JSON).
  MemoryEstimate memory_estimate() const override {
    constexpr double kMeshBytesPerRank = 32;
    constexpr double kJsonBytesPerRank = sizeof(nlohmann::json) + 8;
    const double n = rank_map_estimate(mesh);
    const double models = compare_models ? 2 : 1;
    const double meshes = models * static_cast<double>(1 + root_flattens.size() + ops.size());
    char ranks_text[32];
    std::snprintf(ranks_text, sizeof ranks_text, "%.4g", n);
    double bytes = meshes * n * kMeshBytesPerRank;
    std::string detail = std::string("a mesh of ") + ranks_text + " ranks, built " +
                         std::to_string(static_cast<int>(meshes)) + " time(s) at " +
                         format_byte_size(kMeshBytesPerRank) + " per rank";
    if (compare_models) {
      bytes += models * n * n * kJsonBytesPerRank;
      detail += ", and every rank's mesh_for_rank under both models (2 x " +
                std::string(ranks_text) + "^2 ranks x " + format_byte_size(kJsonBytesPerRank) + ")";
    }
    bytes += static_cast<double>(expect.mesh_for_rank.size()) * n * kJsonBytesPerRank;
    if (expect.groups) bytes += n * static_cast<double>(expect.groups->size()) * kJsonBytesPerRank;
    return {bytes, "mesh", detail};
  }

  Outcome run(RunContext&) override {
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

  std::optional<nlohmann::json> impl_request(const std::filesystem::path&,
                                             std::string& why) override {
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

  // The answer's `model` says which layout model the implementation computed (the case's own
  // when absent); each observable is judged as judging() decides for that model.
  Outcome check_observables(const nlohmann::json& observables,
                            const std::filesystem::path&) override {
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

  // The whole op sequence, `calls` times.
  double time_calls(RunContext&, std::int64_t calls) override {
    const double start = monotonic_seconds();
    for (std::int64_t i = 0; i < calls; ++i) keep_result(execute(model));
    return monotonic_seconds() - start;
  }

 private:
  // judging()'s answers per model, computed once: the request and the check both need them.
  std::map<LayoutModel, Judging> judgings_;

  std::string to_string_model() const { return std::string(to_string(model)); }

  LayoutModel other_model() const {
    return model == LayoutModel::one_level ? LayoutModel::two_level : LayoutModel::one_level;
  }

  bool ends_in_submeshes() const {
    return !ops.empty() && std::holds_alternative<SubmeshesOp>(ops.back());
  }

  // The observables `expect` asks about (all = false), or those and every one a model
  // comparison judges besides (all = true: layout, shape, names, groups, and the submeshes of a
  // last submeshes op), in the order they are judged.
  std::vector<ObservableRef> observable_refs(bool all) const {
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

  // meshgate's observables under `which`: those observable_refs(true) names, with a rank's
  // view that the model cannot show as the rejection's text; nullopt, with the rejection in
  // `error`, when the model rejects the case.
  std::optional<Observed> observe_model(LayoutModel which, std::string& error,
                                        bool orthogonal = false) const {
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

  const Judging& judging(LayoutModel answered) {
    auto it = judgings_.find(answered);
    if (it == judgings_.end()) it = judgings_.emplace(answered, make_judging(answered)).first;
    return it->second;
  }

  // How an answer computed under `answered` is judged. The case's own model: every observable
  // `expect` asks about. The other model: meshgate runs the case under both; where one model
  // rejects it and the other does not, or both reject it but the other not in the words the
  // case expects, nothing can be judged; where both accept it, each expected observable on
  // which the two models agree is judged against `expect`, and one on which they differ is
  // left out. A compare_models case is judged on the side of its comparison that the
  // implementation computes: the observables `expect` does not settle (layout, shape, names,
  // groups, submeshes, and the model-dependent ones) against meshgate's answer for that model.
  Judging make_judging(LayoutModel answered) const {
    Judging j;
    const std::vector<ObservableRef> expected = observable_refs(false);
    if (answered == model) {
      // The case's own model: every observable `expect` asks about, as in meshgate's own run.
      j.rejection = expects_rejection;
      for (const ObservableRef& ref : expected) j.judged.push_back(ref.name);
      if (compare_models) {
        std::string error;
        j.reference = observe_model(model, error);
      }
      add_unjudged(j, expected);
      return j;
    }
    const std::string own_name = to_string_model();
    const std::string their_name(to_string(answered));
    std::string own_error;
    std::string their_error;
    const std::optional<Observed> own = observe_model(model, own_error);
    // The other model as PyTorch ships it: the 2-level model with #172343's check.
    const std::optional<Observed> theirs =
        observe_model(answered, their_error, answered == LayoutModel::two_level);
    if (own.has_value() != theirs.has_value()) {
      j.why_not = own ? "meshgate's " + their_name + " model rejects the case (" +
                            shorten(their_error) + ") where the " + own_name +
                            " model it is written for accepts it"
                      : "the case expects the rejection of the " + own_name +
                            " model it is written for (" + shorten(own_error) +
                            "), and meshgate's " + their_name + " model accepts it";
      return j;
    }
    if (!theirs) {
      // Both reject: the rejection is judged, on the words of the exception, which must be
      // PyTorch's: meshgate's message follows them with an explanation in parentheses that no
      // other implementation prints.
      if (!expects_rejection) {
        j.why_not = "both of meshgate's layout models reject the case, which expects a result: " +
                    shorten(their_error);
      } else if (!expected_message.empty() &&
                 pytorch_words(their_error).find(expected_message) == std::string::npos) {
        j.why_not =
            their_error.find(expected_message) == std::string::npos
                ? "both layout models reject the case, but meshgate's " + their_name +
                      " model not with the expected '" + expected_message + "': " +
                      shorten(their_error)
                : "the case expects words of meshgate's own explanation ('" + expected_message +
                      "'), which follows the exception's words in meshgate's message: " +
                      shorten(their_error);
      } else {
        j.rejection = true;
      }
      return j;
    }
    // Both accept: what the two models agree on is judged against expect.
    j.rejection = expects_rejection;
    j.reference = theirs;
    for (const ObservableRef& ref : expected) {
      if (ref.value(*own) == ref.value(*theirs)) {
        j.judged.push_back(ref.name);
      } else if (compare_models) {
        j.against_meshgate.push_back(ref.name);
      } else {
        j.model_dependent.push_back(ref.name);
      }
    }
    add_unjudged(j, expected);
    if (j.judged.empty() && j.against_meshgate.empty() && !j.rejection &&
        !j.model_dependent.empty()) {
      j.why_not = "every observable the case expects (" + join_names(j.model_dependent) +
                  ") differs between meshgate's " + own_name + " model, which the case is "
                  "written for, and its " + their_name + " model";
    }
    return j;
  }

  // The rest of a judging: a compare_models case's other observables against meshgate's answer
  // (when the model accepts the case), and what is no observable of the protocol; a case that
  // expects warnings alone cannot be judged.
  void add_unjudged(Judging& j, const std::vector<ObservableRef>& expected) const {
    if (compare_models) {
      if (j.reference) {
        for (const ObservableRef& ref : observable_refs(true)) {
          const bool in_expect =
              std::any_of(expected.begin(), expected.end(),
                          [&](const ObservableRef& e) { return e.name == ref.name; });
          if (!in_expect) j.against_meshgate.push_back(ref.name);
        }
      }
      j.unobservable.push_back(model_differences ? "model_differences"
                               : models_agree    ? "models_agree"
                                                 : "compare_models");
      if (equal_to) j.unobservable.push_back("equal_to");
    }
    if (expect.warnings) {
      j.unobservable.push_back("warnings");
      if (j.judged.empty() && j.against_meshgate.empty() && j.model_dependent.empty() &&
          !j.rejection) {
        j.why_not = "expect.warnings counts the warnings of meshgate's DeviceMesh model; "
                    "warnings are no observable of the meshgate.impl/1 protocol";
      }
    }
  }

  // A rejection without meshgate's explanation: "ValueError: sizes (2, 4) and strides (4, 1, 1)
  // don't match (layout ...)" -> "ValueError: sizes (2, 4) and strides (4, 1, 1) don't match".
  // The explanation is the parenthesized group that ends the message, after a blank.
  static std::string pytorch_words(const std::string& message) {
    if (message.empty() || message.back() != ')') return message;
    int depth = 0;
    for (std::size_t i = message.size(); i-- > 0;) {
      if (message[i] == ')') ++depth;
      if (message[i] == '(' && --depth == 0)
        return i > 0 && message[i - 1] == ' ' ? message.substr(0, i - 1) : message;
    }
    return message;
  }

  static std::string join_names(const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  }

  // What the row says of how it was judged, when it was not simply judged on every observable
  // `expect` asks about: e.g. "judged on shape, groups; not compared: layout (...)".
  std::string judging_note(const Judging& j, LayoutModel answered) const {
    const std::string their_name(to_string(answered));
    std::vector<std::string> parts;
    if (j.rejection && j.judged.empty()) parts.push_back("judged on the rejection");
    if (!j.judged.empty()) parts.push_back("judged on " + join_names(j.judged));
    if (!j.against_meshgate.empty()) {
      parts.push_back("judged against meshgate's " + their_name + " model (the side of the " +
                      "model comparison the implementation computes): " +
                      join_names(j.against_meshgate));
    }
    if (!j.model_dependent.empty()) {
      parts.push_back("not compared: " + join_names(j.model_dependent) +
                      " (the case is written for the " + to_string_model() +
                      " layout model and the implementation has " + their_name +
                      ", where meshgate's models give it another value)");
    }
    if (!j.unobservable.empty()) {
      parts.push_back("not compared: " + join_names(j.unobservable) +
                      " (no observable of the meshgate.impl/1 protocol)");
    }
    std::string out;
    for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
    return out;
  }

  // An implementation's observables judged as `j` says.
  Outcome judge_answer(const Observed& o, const Judging& j, LayoutModel answered) const {
    std::vector<std::string> mismatches;
    check_expectations(o, mismatches, [&](const std::string& name) {
      return std::find(j.judged.begin(), j.judged.end(), name) != j.judged.end();
    });
    for (const ObservableRef& ref : observable_refs(true)) {
      if (std::find(j.against_meshgate.begin(), j.against_meshgate.end(), ref.name) ==
          j.against_meshgate.end())
        continue;
      const nlohmann::json expected = ref.value(*j.reference);
      const nlohmann::json actual = ref.value(o);
      if (expected != actual) {
        mismatches.push_back(ref.name + " (meshgate's " + std::string(to_string(answered)) +
                             " model): expected " + shorten(expected.dump(), 400) + ", got " +
                             shorten(actual.dump(), 400));
      }
    }
    Outcome outcome;
    outcome.metrics["layout"] = to_string(o.layout);
    outcome.metrics["shape"] = o.shape;
    const bool plain = answered == model && j.against_meshgate.empty() &&
                       j.model_dependent.empty() && j.unobservable.empty();
    const std::string note = plain ? "" : judging_note(j, answered);
    if (!plain) {
      outcome.metrics["model_judging"] = {{"case_model", to_string_model()},
                                          {"impl_model", to_string(answered)},
                                          {"judged", j.judged},
                                          {"against_meshgate", j.against_meshgate},
                                          {"not_compared", j.model_dependent},
                                          {"not_observable", j.unobservable},
                                          {"note", note}};
    }
    if (!mismatches.empty()) {
      outcome.status = Status::fail;
      outcome.message = join(mismatches) + (note.empty() ? "" : " [" + note + "]");
    }
    return outcome;
  }

  static std::string join(const std::vector<std::string>& parts) {
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
    return out;
  }

  static std::string rejection_message(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    }
  }

  // Flattens and records whether the name was new, reused, or the 1-D mesh's own.
  static DeviceMesh flatten_on(const DeviceMesh& m, const FlattenSpec& f,
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

  // PR #172343, which PyTorch 2.15 has together with the 2-level model: every DeviceMesh is
  // created only if check_orthogonal accepts its collapsed layout. meshgate's two_level model
  // keeps the set-based check of #172089, and its model comparison adds #172343 as a new
  // rejection; `orthogonal` applies it to every mesh the case creates, for judging an
  // implementation of the 2-level model as PyTorch ships it.
  static void check_orthogonal_creation(const Layout& layout) {
    if (!check_orthogonal(layout)) {
      throw meshgate::Error(ErrorKind::assertion,
                            "Please use a non-overlapping layout when creating a DeviceMesh. "
                            "(check_orthogonal of PR #172343 rejects " +
                                to_string(layout) + ")");
    }
  }

  Executed execute(LayoutModel which, bool orthogonal = false) const {
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

  // Runs the configuration under both models and lists every observable on which they differ,
  // one entry per observable (the first differing dim or rank), one_level first.
  std::vector<Disagreement> compare_models_on(const std::optional<Executed>& primary,
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
    auto text = [](const nlohmann::json& v) {
      return shorten(v.is_string() ? v.get<std::string>() : v.dump());
    };
    auto compare = [&](ChangeClass change, const nlohmann::json& x, const nlohmann::json& y) {
      for (const auto& [key, mine] : x.items()) {
        const nlohmann::json theirs = y.contains(key) ? y[key] : nlohmann::json();
        if (theirs == mine) continue;
        // Name the first differing rank (per-rank maps) or index (per-dim and per-row lists).
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
    };
    compare(ChangeClass::semantic_change, observe_function(*one), observe_function(*two));
    const std::optional<DeviceMesh> one_target =
        equal_to ? std::optional(equal_to->build(LayoutModel::one_level, current_rank))
                 : std::nullopt;
    const std::optional<DeviceMesh> two_target =
        equal_to ? std::optional(equal_to->build(LayoutModel::two_level, current_rank))
                 : std::nullopt;
    compare(ChangeClass::representation_change, observe_representation(*one, one_target),
            observe_representation(*two, two_target));
    // #172343 replaces the set-based overlap check with check_orthogonal on the 2-level
    // layouts: a mesh one_level builds, such as (2,2):(3,1), is then rejected at creation.
    if (!check_orthogonal(two->mesh.layout())) {
      differences.push_back({ChangeClass::new_rejection, "check_orthogonal of #172343",
                             "accepts (set-based non-overlap check)",
                             "rejects " + to_string(two->mesh.layout()) + " at creation"});
    }
    return differences;
  }

  void check_model_differences(const std::vector<Disagreement>& differences,
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

  // meshgate's own observables of the mesh the ops built: only those `expect` asks about.
  Observed observe(const Executed& e) const {
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

  // An implementation's observables (docs/impl-protocol.md, mesh) in the same form; ImplFailure
  // for one of the wrong type or shape, and for one the case expects that is missing.
  // need_groups / need_submeshes: judged although `expect` does not ask for them.
  Observed read_observed(const nlohmann::json& obs, bool need_groups = false,
                         bool need_submeshes = false) const {
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

  // The one check of observables against `expect`, after any mismatches of the model comparison.
  Outcome judge(const Observed& o, Outcome outcome, std::vector<std::string> mismatches) const {
    check_expectations(o, mismatches);
    outcome.metrics["layout"] = to_string(o.layout);
    outcome.metrics["shape"] = o.shape;
    if (!mismatches.empty()) {
      outcome.status = Status::fail;
      outcome.message = join(mismatches);
    }
    return outcome;
  }

  // judged: which observables (by ObservableRef name) are judged; all when empty.
  void check_expectations(const Observed& o, std::vector<std::string>& mismatches,
                          const std::function<bool(const std::string&)>& judged = {}) const {
    const auto on = [&](const std::string& what) { return !judged || judged(what); };
    auto check = [&](const std::string& what, const nlohmann::json& expected,
                     const nlohmann::json& actual) {
      if (on(what) && expected != actual)
        mismatches.push_back(what + ": expected " + shorten(expected.dump(), 400) + ", got " +
                             shorten(actual.dump(), 400));
    };
    if (expect.layout && on("layout") && !(o.layout == *expect.layout)) {
      mismatches.push_back("layout: expected " + to_string(*expect.layout) + ", got " +
                           to_string(o.layout));
    }
    if (expect.shape) check("shape", *expect.shape, o.shape);
    if (expect.names) check("names", *expect.names, o.names);
    if (expect.groups) check("groups", *expect.groups, o.groups.value_or(nlohmann::json()));
    for (const auto& [rank, expected] : expect.coordinates)
      check("coordinates of rank " + std::to_string(rank), expected, o.coordinates.at(rank));
    for (const auto& [rank, expected] : expect.mesh_for_rank)
      check("mesh_for_rank of rank " + std::to_string(rank), expected, o.mesh_for_rank.at(rank));
    if (expect.submeshes && on("submeshes")) {
      if (!o.submeshes) {
        mismatches.push_back("submeshes: expected " + shorten(expect.submeshes->dump()) +
                             ", but no submeshes op ran");
      } else {
        check("submeshes", *expect.submeshes, *o.submeshes);
      }
    }
    if (expect.warnings && o.warnings) {
      const std::vector<std::string>& warnings = *o.warnings;
      if (static_cast<std::int64_t>(warnings.size()) != *expect.warnings) {
        mismatches.push_back("warnings: expected " + std::to_string(*expect.warnings) + ", got " +
                             std::to_string(warnings.size()) +
                             (warnings.empty() ? "" : " (" + join(warnings) + ")"));
      }
    }
  }
};

FlattenSpec read_flatten(const YAML::Node& value, const CaseNode& at, std::string_view key) {
  FlattenSpec f;
  if (value.IsSequence()) {
    f.dims = read_dim_names(value, at, key);
    return f;
  }
  if (value.IsNull()) return f;
  if (!value.IsMap())
    at.fail_at(value, key, "expected {dims: [..], name: ..} or a list of dim names");
  for (const auto& item : value) {
    const std::string k = item.first.Scalar();
    if (k == "dims") {
      f.dims = read_dim_names(item.second, at, key);
    } else if (k == "name") {
      // null is _flatten(None), the default name; anything else must be one dim name.
      if (item.second.IsNull()) continue;
      if (!item.second.IsScalar()) at.fail_at(item.second, key, "name is one dim name");
      f.name = read_dim_names(item.second, at, key).front();
    } else {
      at.fail_at(item.first, key, "unknown key '" + k + "' (known: dims, name)");
    }
  }
  return f;
}

Op read_op(const YAML::Node& item, const CaseNode& at) {
  if (!item.IsMap() || item.size() != 1) {
    at.fail_at(
        item, "ops",
        "each op is a mapping with one key: slice, flatten, unflatten, submeshes or concatenate");
  }
  const std::string name = item.begin()->first.Scalar();
  const YAML::Node value = item.begin()->second;
  const std::string key = "ops." + name;
  if (name == "slice") return SliceOp{read_dim_names(value, at, key)};
  if (name == "flatten") return read_flatten(value, at, key);
  if (name == "submeshes") {
    if (!value.IsScalar()) at.fail_at(value, key, "expected a dim name");
    return SubmeshesOp{value.Scalar()};
  }
  if (name == "concatenate") {
    if (!value.IsSequence())
      at.fail_at(value, key, "expected a list of dim-name lists, e.g. [[dp], [tp]]");
    ConcatenateOp c;
    for (const auto& part : value) c.parts.push_back(read_dim_names(part, at, key));
    return c;
  }
  if (name == "unflatten") {
    if (!value.IsMap()) at.fail_at(value, key, "expected {dim: .., sizes: [..], names: [..]}");
    UnflattenOp u;
    bool has_dim = false;
    bool has_sizes = false;
    for (const auto& field : value) {
      const std::string k = field.first.Scalar();
      if (k == "dim") {
        std::int64_t index = 0;
        has_dim = true;
        if (field.second.IsScalar() && field.second.Tag() != "!" &&
            detail::decode_strict(field.second, index)) {
          u.dim = index;
        } else if (field.second.IsScalar()) {
          u.dim = field.second.Scalar();
        } else {
          at.fail_at(field.second, key, "dim is a dim name or an index");
        }
      } else if (k == "sizes") {
        u.sizes = read_int_list(field.second, at, key + ".sizes");
        has_sizes = true;
      } else if (k == "names") {
        u.names = read_dim_names(field.second, at, key + ".names");
      } else {
        at.fail_at(field.first, key, "unknown key '" + k + "' (known: dim, sizes, names)");
      }
    }
    if (!has_dim || !has_sizes) at.fail_at(value, key, "needs dim and sizes");
    return u;
  }
  at.fail_at(
      item, "ops",
      "unknown op '" + name + "' (known: slice, flatten, unflatten, submeshes, concatenate)");
}

// A nested list of ranks whose ints all sit `depth` lists deep, as the observable it is compared
// with: groups (dims -> groups -> ranks) or submeshes (submeshes -> ranks). A flat or scalar
// value would only fail at run time; here it is an input error at the offending entry.
nlohmann::json read_rank_lists(const YAML::Node& value, const CaseNode& at, std::string_view key,
                               int depth, std::string_view what) {
  const auto check = [&](const auto& self, const YAML::Node& node, int left) -> void {
    if (left == 0) {
      if (!node.IsScalar()) at.fail_at(node, key, "expected a rank in " + std::string(what));
      return;
    }
    if (!node.IsSequence()) at.fail_at(node, key, "expected " + std::string(what));
    for (const auto& item : node) self(self, item, left - 1);
  };
  check(check, value, depth);
  return read_nested_ints(value, at, key);
}

std::int64_t read_rank_key(const YAML::Node& key, const CaseNode& at, std::string_view where) {
  try {
    std::size_t used = 0;
    const std::int64_t rank = std::stoll(key.Scalar(), &used);
    if (used == key.Scalar().size()) return rank;
  } catch (const std::exception&) {
  }
  at.fail_at(
      key, where,
      "rank keys are integers (written as ints or quoted strings), got '" + key.Scalar() + "'");
}

void read_expect(CaseNode& e, MeshCase& c) {
  if (YAML::Node v = e.raw("layout"); v && !v.IsNull()) {
    try {
      c.expect.layout = read_layout(v, e, "layout");
    } catch (const meshgate::Error& err) {
      e.fail_at(v, "layout", err.what());
    }
  }
  if (YAML::Node v = e.raw("shape"); v && !v.IsNull())
    c.expect.shape = read_int_list(v, e, "shape");
  if (YAML::Node v = e.raw("names"); v && !v.IsNull())
    c.expect.names = read_dim_names(v, e, "names");
  if (YAML::Node v = e.raw("groups"); v && !v.IsNull()) {
    c.expect.groups = read_rank_lists(
        v, e, "groups", 3, "one list of rank groups per dim, e.g. [[[0, 2], [1, 3]], [[0, 1], [2, 3]]]");
  }
  if (YAML::Node v = e.raw("submeshes"); v && !v.IsNull()) {
    c.expect.submeshes =
        read_rank_lists(v, e, "submeshes", 2, "one list of ranks per submesh, e.g. [[0, 1], [2, 3]]");
  }
  c.expect.warnings = e.optional<std::int64_t>("warnings");
  if (YAML::Node v = e.raw("coordinates"); v && !v.IsNull()) {
    if (!v.IsMap())
      e.fail_at(v, "coordinates", "expected a mapping rank -> coordinate list (or null)");
    for (const auto& item : v) {
      const std::int64_t rank = read_rank_key(item.first, e, "coordinates");
      c.expect.coordinates.emplace_back(
          rank, item.second.IsNull()
                    ? nlohmann::json()
                    : nlohmann::json(read_int_list(item.second, e, "coordinates")));
    }
  }
  if (YAML::Node v = e.raw("mesh_for_rank"); v && !v.IsNull()) {
    if (!v.IsMap()) e.fail_at(v, "mesh_for_rank", "expected a mapping rank -> nested rank list");
    for (const auto& item : v) {
      c.expect.mesh_for_rank.emplace_back(read_rank_key(item.first, e, "mesh_for_rank"),
                                          read_nested_ints(item.second, e, "mesh_for_rank"));
    }
  }
}

}  // namespace

const std::vector<std::string>& mesh_case_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = mesh_spec_keys("mesh");
    for (std::string key :
         {"model", "flatten", "ops", "rank", "compare_models", "models_agree", "model_differences",
          "expect", "expect.layout", "expect.shape", "expect.names", "expect.groups",
          "expect.submeshes", "expect.warnings", "expect.coordinates", "expect.mesh_for_rank"})
      k.push_back(std::move(key));
    for (std::string key : mesh_spec_keys("equal_to")) k.push_back(std::move(key));
    return k;
  }();
  return keys;
}

std::unique_ptr<PreparedCase> parse_mesh_case(CaseNode& node, bool expect_error) {
  auto c = std::make_unique<MeshCase>();

  c->mesh = read_mesh_spec(node);

  if (auto model = node.optional<std::string>("model")) {
    try {
      c->model = parse_layout_model(*model);
    } catch (const meshgate::Error&) {
      reject_value(node, "model", "expected one_level or two_level, got '" + *model + "'");
    }
  }
  if (YAML::Node v = node.raw("flatten"); v && !v.IsNull()) {
    if (!v.IsSequence())
      node.fail_at(v, "flatten", "expected a list of {dims: [..], name: ..} or dim-name lists");
    for (const auto& item : v) c->root_flattens.push_back(read_flatten(item, node, "flatten"));
  }
  if (YAML::Node v = node.raw("ops"); v && !v.IsNull()) {
    if (!v.IsSequence()) node.fail_at(v, "ops", "expected a list of ops");
    for (const auto& item : v) c->ops.push_back(read_op(item, node));
    for (std::size_t i = 0; i + 1 < c->ops.size(); ++i) {
      if (std::holds_alternative<SubmeshesOp>(c->ops[i]))
        node.fail_at(v[i], "ops", "submeshes must be the last op");
    }
  }
  c->current_rank = node.optional<std::int64_t>("rank");
  c->expects_rejection = expect_error;
  if (expect_error) {
    // The runner read expect_error: true, or a substring of the message (validate.cpp).
    const YAML::Node v = node.node()["expect_error"];
    bool flag = false;
    if (v && v.IsScalar() && !(v.Tag() != "!" && YAML::convert<bool>::decode(v, flag)))
      c->expected_message = v.Scalar();
  }
  if (node.has("equal_to")) c->equal_to = read_mesh_spec(node, "equal_to");
  c->compare_models = node.optional<bool>("compare_models").value_or(false);
  if (auto agree = node.optional<bool>("models_agree")) {
    if (!c->compare_models)
      node.fail("models_agree", "only means something with compare_models: true");
    c->models_agree = *agree;
  }
  if (YAML::Node v = node.raw("model_differences"); v && !v.IsNull()) {
    if (!c->compare_models)
      node.fail("model_differences", "only means something with compare_models: true");
    if (c->models_agree)
      node.fail("model_differences", "give either models_agree or model_differences, not both");
    if (!v.IsSequence()) node.fail_at(v, "model_differences", "expected a list of change classes");
    std::vector<ChangeClass> classes;
    for (const auto& item : v) {
      const auto change = item.IsScalar() ? parse_change_class(item.Scalar()) : std::nullopt;
      if (!change) {
        node.fail_at(item, "model_differences",
                     "unknown change class '" + (item.IsScalar() ? item.Scalar() : "") +
                         "' (known: new_rejection, semantic_change, representation_change, "
                         "relaxation)");
      }
      if (std::find(classes.begin(), classes.end(), *change) == classes.end())
        classes.push_back(*change);
    }
    std::sort(classes.begin(), classes.end());
    c->model_differences = classes;
  }
  if (c->equal_to && !c->compare_models)
    node.fail("equal_to", "only means something with compare_models: true");

  if (node.has("expect")) {
    CaseNode e = node.child("expect");
    read_expect(e, *c);
  } else if (!expect_error && !c->compare_models) {
    node.fail("expect", "is required (or expect_error) for a mesh case");
  }

  c->params_json = {{"mesh", yaml_to_json(node.node()["mesh"])}, {"model", to_string(c->model)}};
  for (const char* key : {"flatten", "ops", "rank", "equal_to", "compare_models", "models_agree",
                          "model_differences"}) {
    if (node.node()[key]) c->params_json[key] = yaml_to_json(node.node()[key]);
  }
  return c;
}

}  // namespace meshgate::runner

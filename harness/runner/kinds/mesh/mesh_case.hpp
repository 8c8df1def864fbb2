#pragma once
// kind: mesh — build a DeviceMesh (docs/kinds.md, DeviceMesh), register flattened dims on the root,
// apply slice/flatten/unflatten/concatenate/submeshes in order, and compare the current mesh with
// `expect`. With compare_models the same configuration also runs under the other layout model and
// every observable difference is recorded and classified (new rejection, semantic change,
// representation change, relaxation, seen from one_level to two_level): the corpus that catches a
// model change such as PR #172089 before it lands.
//
// The kind's files: parse.cpp reads the case, run.cpp runs it on meshgate's DeviceMesh,
// compare_models.cpp runs it under both layout models and classifies what differs, impl.cpp
// hands it to another implementation and reads its observables, judge.cpp judges observables
// (meshgate's or another implementation's) against `expect` and the other model.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
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

std::unique_ptr<PreparedCase> parse_mesh_case(CaseNode& node, bool expect_error);
const std::vector<std::string>& mesh_case_keys();

namespace mesh_kind {

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
bool ints_at_depth(const nlohmann::json& v, int depth);
// Whether `v` is a list nesting ints at any depth, as a rank tensor of any ndim.
bool nested_int_lists(const nlohmann::json& v);

// How a disagreement between the models affects users, worst first. Directions are from
// one_level (PyTorch main) to two_level (PR #172089).
enum class ChangeClass { new_rejection, semantic_change, representation_change, relaxation };
inline constexpr const char* kChangeClassNames[] = {"new_rejection", "semantic_change",
                                                    "representation_change", "relaxation"};

std::optional<ChangeClass> parse_change_class(const std::string& text);

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

// The ranks of `m` in the order of its layout, from position zero.
nlohmann::json mesh_ranks(const DeviceMesh& m);
// Every dim's rank groups.
nlohmann::json all_groups(const DeviceMesh& m);
std::string shorten(std::string text, std::size_t limit = 240);
// The error's type: its message up to the first ':'.
std::string error_type(const std::string& message);
// What user code sees of the result's function: ranks, groups, coordinates, views, submeshes.
// A difference here is a semantic change.
nlohmann::json observe_function(const Executed& e);
// How the model writes the result: each dim's layout as `mesh._layout[d]` hands it to user code
// (text, int shape or tuple, len), and == / hash against the case's `equal_to` mesh. A
// difference here with the same function is a representation change.
nlohmann::json observe_representation(const Executed& e,
                                      const std::optional<DeviceMesh>& equal_to);

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
  MemoryEstimate memory_estimate() const override;

  Outcome run(RunContext&) override;

  std::optional<nlohmann::json> impl_request(const std::filesystem::path&,
                                             std::string& why) override;

  // The answer's `model` says which layout model the implementation computed (the case's own
  // when absent); each observable is judged as judging() decides for that model.
  Outcome check_observables(const nlohmann::json& observables,
                            const std::filesystem::path&) override;

  // The whole op sequence, `calls` times.
  double time_calls(RunContext&, std::int64_t calls) override;

 private:
  // judging()'s answers per model, computed once: the request and the check both need them.
  std::map<LayoutModel, Judging> judgings_;

  std::string to_string_model() const { return std::string(to_string(model)); }

  LayoutModel other_model() const;

  bool ends_in_submeshes() const;

  // The observables `expect` asks about (all = false), or those and every one a model
  // comparison judges besides (all = true: layout, shape, names, groups, and the submeshes of a
  // last submeshes op), in the order they are judged.
  std::vector<ObservableRef> observable_refs(bool all) const;

  // meshgate's observables under `which`: those observable_refs(true) names, with a rank's
  // view that the model cannot show as the rejection's text; nullopt, with the rejection in
  // `error`, when the model rejects the case.
  std::optional<Observed> observe_model(LayoutModel which, std::string& error,
                                        bool orthogonal = false) const;

  const Judging& judging(LayoutModel answered);

  // How an answer computed under `answered` is judged. The case's own model: every observable
  // `expect` asks about. The other model: meshgate runs the case under both; where one model
  // rejects it and the other does not, or both reject it but the other not in the words the
  // case expects, nothing can be judged; where both accept it, each expected observable on
  // which the two models agree is judged against `expect`, and one on which they differ is
  // left out. A compare_models case is judged on the side of its comparison that the
  // implementation computes: the observables `expect` does not settle (layout, shape, names,
  // groups, submeshes, and the model-dependent ones) against meshgate's answer for that model.
  Judging make_judging(LayoutModel answered) const;

  // The rest of a judging: a compare_models case's other observables against meshgate's answer
  // (when the model accepts the case), and what is no observable of the protocol; a case that
  // expects warnings alone cannot be judged.
  void add_unjudged(Judging& j, const std::vector<ObservableRef>& expected) const;

  // A rejection without meshgate's explanation: "ValueError: sizes (2, 4) and strides (4, 1, 1)
  // don't match (layout ...)" -> "ValueError: sizes (2, 4) and strides (4, 1, 1) don't match".
  // The explanation is the parenthesized group that ends the message, after a blank.
  static std::string pytorch_words(const std::string& message);

  static std::string join_names(const std::vector<std::string>& names);

  // What the row says of how it was judged, when it was not simply judged on every observable
  // `expect` asks about: e.g. "judged on shape, groups; not compared: layout (...)".
  std::string judging_note(const Judging& j, LayoutModel answered) const;

  // An implementation's observables judged as `j` says.
  Outcome judge_answer(const Observed& o, const Judging& j, LayoutModel answered) const;

  static std::string join(const std::vector<std::string>& parts);

  static std::string rejection_message(const std::exception_ptr& error);

  // Flattens and records whether the name was new, reused, or the 1-D mesh's own.
  static DeviceMesh flatten_on(const DeviceMesh& m, const FlattenSpec& f,
                               std::vector<std::string>& decisions);

  // PR #172343, which PyTorch 2.15 has together with the 2-level model: every DeviceMesh is
  // created only if check_orthogonal accepts its collapsed layout. meshgate's two_level model
  // keeps the set-based check of #172089, and its model comparison adds #172343 as a new
  // rejection; `orthogonal` applies it to every mesh the case creates, for judging an
  // implementation of the 2-level model as PyTorch ships it.
  static void check_orthogonal_creation(const Layout& layout);

  Executed execute(LayoutModel which, bool orthogonal = false) const;

  // Runs the configuration under both models and lists every observable on which they differ,
  // one entry per observable (the first differing dim or rank), one_level first.
  std::vector<Disagreement> compare_models_on(const std::optional<Executed>& primary,
                                              const std::exception_ptr& primary_error) const;

  void check_model_differences(const std::vector<Disagreement>& differences,
                               std::vector<std::string>& mismatches) const;

  // meshgate's own observables of the mesh the ops built: only those `expect` asks about.
  Observed observe(const Executed& e) const;

  // An implementation's observables (docs/impl-protocol.md, mesh) in the same form; ImplFailure
  // for one of the wrong type or shape, and for one the case expects that is missing.
  // need_groups / need_submeshes: judged although `expect` does not ask for them.
  Observed read_observed(const nlohmann::json& obs, bool need_groups = false,
                         bool need_submeshes = false) const;

  // The one check of observables against `expect`, after any mismatches of the model comparison.
  Outcome judge(const Observed& o, Outcome outcome, std::vector<std::string> mismatches) const;

  // judged: which observables (by ObservableRef name) are judged; all when empty.
  void check_expectations(const Observed& o, std::vector<std::string>& mismatches,
                          const std::function<bool(const std::string&)>& judged = {}) const;
};

}  // namespace mesh_kind
}  // namespace meshgate::runner

// Reading a mesh case: its mesh, ops and expectations, its keys and memory estimate.

#include "kinds/mesh/mesh_case.hpp"

namespace meshgate::runner {
namespace mesh_kind {
namespace {

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

MemoryEstimate MeshCase::memory_estimate() const {
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

}  // namespace mesh_kind

using namespace mesh_kind;

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

#include "case_file.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "diagnostics.hpp"
#include "yaml_prescan.hpp"

namespace meshgate::runner {
struct KeepPosition;
}

namespace YAML {
// yaml-cpp lets only its parser set a node's position, and YAML::Clone drops positions. This
// specialization of as_if, a template that YAML::Node befriends, lets an expanded case's copy
// keep the position of the node it copies, so its errors point into the file.
template <>
struct as_if<meshgate::runner::KeepPosition, void> {
  static void copy_position(Node& node, const Node& source) {
    node.EnsureNodeExists();
    node.m_pNode->set_mark(source.Mark());
  }
};
}  // namespace YAML

namespace meshgate::runner {
namespace fs = std::filesystem;

namespace {

bool is_case_file(const fs::path& path) {
  const std::string ext = path.extension().string();
  return ext == ".yaml" || ext == ".yml";
}

// Const lookup: yaml-cpp's non-const operator[] inserts missing keys.
YAML::Node lookup(const YAML::Node& map, std::string_view key) {
  if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

YAML::Node lookup_key_node(const YAML::Node& map, std::string_view key) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->first;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

using Bindings = std::vector<std::pair<std::string, YAML::Node>>;

// Where the errors of one case go, with the prefix that names it.
struct CaseErrors {
  const std::string& file;
  std::string case_label;  // "case 'suite/name'" once known, "case #3" before
  std::vector<std::string>& errors;

  void add(const YAML::Mark& mark, std::string_view key, std::string_view message) const {
    errors.push_back(location(file, mark) + ": " + case_label + ": key '" + std::string(key) +
                     "': " + std::string(message));
  }
};

// A matrix value inside a longer string: scalars as written, a flat list as "2x4" (shapes in
// case names), anything else as flow YAML.
std::string flow_text(const YAML::Node& value) {
  if (value.IsScalar()) return value.Scalar();
  if (value.IsSequence() && value.size() > 0 &&
      std::all_of(value.begin(), value.end(), [](const YAML::Node& v) { return v.IsScalar(); })) {
    std::string joined;
    for (const YAML::Node& v : value) joined += (joined.empty() ? "" : "x") + v.Scalar();
    return joined;
  }
  YAML::Emitter emitter;
  emitter.SetSeqFormat(YAML::Flow);
  emitter.SetMapFormat(YAML::Flow);
  emitter << value;
  return emitter.c_str();
}

// Builds one expanded case as a tree of its own: the case's mapping with the defaults it lacks,
// "${x}" substituted and the matrix left out, every node a fresh copy that keeps the position of
// what it copies. Nothing is shared with the file's parse: yaml-cpp pools the nodes of a tree, and
// a shared node would make every case's pool hold the whole file.
class CaseBuilder {
 public:
  // varying[a]: whether matrix key a has more than one value.
  CaseBuilder(const Bindings& bindings, const std::vector<bool>& varying, const CaseErrors& errs,
              std::size_t& nodes_left)
      : bindings_(bindings), varying_(varying), errs_(errs), nodes_left_(nodes_left) {}

  // False when the file's budget of case nodes ran out (nothing more should be built).
  bool within_budget() const { return within_budget_; }

  YAML::Node build(const YAML::Node& case_node, const YAML::Node& defaults) {
    YAML::Node out = fresh(YAML::NodeType::Map, case_node);
    for (auto it = case_node.begin(); it != case_node.end(); ++it) {
      const std::string key = it->first.Scalar();
      // The matrix is spent once its values are substituted; a copy in every combination
      // would make each case as large as the whole matrix.
      if (key == "matrix") continue;
      YAML::Node value = copy(it->second, key, true);
      if (key == "tags") add_default_tags(value, lookup(defaults, "tags"));
      if (key == "name") append_unnamed_values(value, it->second);
      out.force_insert(copy(it->first, key, false), value);
    }
    // Defaults go under the case: the case's own keys win, tags are united (above).
    if (defaults.IsMap()) {
      for (auto it = defaults.begin(); it != defaults.end(); ++it) {
        const std::string key = it->first.Scalar();
        if (lookup(case_node, key).IsDefined()) continue;
        out.force_insert(copy(it->first, key, false), copy(it->second, key, true));
      }
    }
    return out;
  }

 private:
  // A matrix key that varies but that the name does not mention adds "-<value>" to the name, in
  // matrix key order (as pytest's parametrize ids): `name: gemm` with `dtype: [f32, bf16]` gives
  // gemm-f32 and gemm-bf16 rather than two cases with one id. Keys with a single value leave
  // the name alone, so that adding one never renames a case.
  void append_unnamed_values(YAML::Node& name, const YAML::Node& written) {
    if (!name.IsScalar() || !written.IsScalar()) return;
    std::string text = name.Scalar();
    for (std::size_t a = 0; a < bindings_.size(); ++a) {
      if (varying_[a] &&
          written.Scalar().find("${" + bindings_[a].first + "}") == std::string::npos) {
        text += "-" + name_part(flow_text(bindings_[a].second));
      }
    }
    if (text != name.Scalar()) name = text;  // set_scalar keeps the node's position
  }

  // A value as a piece of a case name: what names cannot hold ('/', spaces, braces, ...)
  // becomes '-'.
  static std::string name_part(const std::string& value) {
    std::string part;
    for (const char c : value) {
      const bool kept = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                        c == '+' || c == '-';
      if (kept) {
        part += c;
      } else if (!part.empty() && part.back() != '-') {
        part += '-';
      }
    }
    while (!part.empty() && part.back() == '-') part.pop_back();
    return part.empty() ? "_" : part;
  }

  void add_default_tags(YAML::Node& tags, const YAML::Node& default_tags) {
    if (!tags.IsSequence() || !default_tags.IsSequence()) return;
    for (const YAML::Node& tag : default_tags) {
      bool present = false;
      for (const YAML::Node& have : tags) present = present || have.Scalar() == tag.Scalar();
      if (!present) tags.push_back(copy(tag, "tags", true));
    }
  }

  // A node of `type` with the position, tag and style of `source`, counted against the budget.
  YAML::Node fresh(YAML::NodeType::value type, const YAML::Node& source) {
    if (nodes_left_ == 0) {
      within_budget_ = false;
    } else {
      --nodes_left_;
    }
    YAML::Node node(type);
    keep_position(node, source);
    return node;
  }

  static void keep_position(YAML::Node& node, const YAML::Node& source) {
    YAML::as_if<KeepPosition, void>::copy_position(node, source);
    node.SetTag(source.Tag());
    node.SetStyle(source.Style());
  }

  // Children first: a finished child joins its parent's pool in one step, whereas a child
  // inserted empty and filled later would keep its later nodes in a pool of its own.
  YAML::Node copy(const YAML::Node& source, std::string_view top_key, bool substitute) {
    if (!within_budget_) return YAML::Node(YAML::NodeType::Null);
    switch (source.Type()) {
      case YAML::NodeType::Scalar:
        return copy_scalar(source, top_key, substitute);
      case YAML::NodeType::Sequence: {
        YAML::Node out = fresh(YAML::NodeType::Sequence, source);
        for (const YAML::Node& item : source) out.push_back(copy(item, top_key, substitute));
        return out;
      }
      case YAML::NodeType::Map: {
        YAML::Node out = fresh(YAML::NodeType::Map, source);
        for (auto it = source.begin(); it != source.end(); ++it) {
          out.force_insert(copy(it->first, top_key, false), copy(it->second, top_key, substitute));
        }
        return out;
      }
      default:
        return fresh(YAML::NodeType::Null, source);
    }
  }

  // Substitutes "${x}" in one scalar. A scalar that is exactly "${x}" becomes a copy of the
  // matrix value (which keeps its YAML type and its own position); otherwise the text changes.
  YAML::Node copy_scalar(const YAML::Node& scalar, std::string_view top_key, bool substitute) {
    const std::string& text = scalar.Scalar();
    YAML::Node out = fresh(YAML::NodeType::Scalar, scalar);
    out = text;  // set_scalar keeps the node's position
    if (!substitute || text.find("${") == std::string::npos) return out;
    std::string replaced;
    std::size_t pos = 0;
    while (pos < text.size()) {
      const std::size_t open = text.find("${", pos);
      if (open == std::string::npos) {
        replaced += text.substr(pos);
        break;
      }
      const std::size_t close = text.find('}', open);
      if (close == std::string::npos) {
        errs_.add(scalar.Mark(), top_key, "unterminated '${' in " + quote_value(text));
        return out;
      }
      const std::string var = text.substr(open + 2, close - open - 2);
      const auto binding = std::find_if(bindings_.begin(), bindings_.end(),
                                        [&](const auto& b) { return b.first == var; });
      if (binding == bindings_.end()) {
        std::vector<std::string> names;
        for (const auto& b : bindings_) names.push_back(b.first);
        std::string message = quote_value("${" + var + "}") + " is not a matrix key";
        message += names.empty() ? ": the case has no matrix" : did_you_mean(var, names);
        errs_.add(scalar.Mark(), top_key, message);
        return out;
      }
      if (open == 0 && close == text.size() - 1) return copy(binding->second, top_key, false);
      replaced += text.substr(pos, open - pos);
      replaced += flow_text(binding->second);
      pos = close + 1;
    }
    out = replaced;
    return out;
  }

  const Bindings& bindings_;
  const std::vector<bool>& varying_;
  const CaseErrors& errs_;
  std::size_t& nodes_left_;
  bool within_budget_ = true;
};

// The matrix as (key, values) in key order; empty when the case has none.
std::optional<std::vector<std::pair<std::string, std::vector<YAML::Node>>>> read_matrix(
    const YAML::Node& case_node, const CaseErrors& errs) {
  std::vector<std::pair<std::string, std::vector<YAML::Node>>> axes;
  const YAML::Node matrix = lookup(case_node, "matrix");
  if (!matrix.IsDefined() || matrix.IsNull()) return axes;
  if (!matrix.IsMap() || matrix.size() == 0) {
    errs.add(matrix.Mark(), "matrix",
             "expected a mapping of lists, e.g. {dtype: [float32, bfloat16]}, got " +
                 describe_node(matrix));
    return std::nullopt;
  }
  for (auto it = matrix.begin(); it != matrix.end(); ++it) {
    const std::string key = it->first.as<std::string>("");
    // A named copy: `it->second` lives in a temporary that a range-for would outlive.
    const YAML::Node listed = it->second;
    std::vector<YAML::Node> values;
    if (listed.IsSequence()) {
      for (const YAML::Node& v : listed) values.push_back(v);
    } else if (listed.IsScalar()) {
      values.push_back(listed);
    }
    if (values.empty()) {
      errs.add(listed.Mark(), "matrix." + key,
               "expected a non-empty list of values, got " + describe_node(listed));
      return std::nullopt;
    }
    axes.emplace_back(key, std::move(values));
  }
  return axes;
}

// Checks name/kind/tags and records one expanded case.
void add_case(const YAML::Node& node, const std::string& file, const std::string& suite,
              std::size_t index, LoadedCases& out) {
  CaseErrors errs{file, "case #" + std::to_string(index + 1), out.errors};
  const std::size_t errors_before = out.errors.size();
  CaseSpec spec;
  spec.file = file;
  spec.mark = node.Mark();
  spec.suite = suite;
  spec.node = node;

  const YAML::Node name = lookup(node, "name");
  if (!name.IsDefined() || name.IsNull()) {
    errs.add(node.Mark(), "name", "is required (a string unique in the suite)");
  } else if (!name.IsScalar() || name.Scalar().empty()) {
    errs.add(name.Mark(), "name", "expected a non-empty string, got " + describe_node(name));
  } else if (const auto control = first_control_character(name.Scalar())) {
    errs.add(name.Mark(), "name",
             quote_value(name.Scalar()) + " contains the control character " + *control +
                 "; names are printed and typed on the command line");
  } else if (name.Scalar().find_first_of("/ ") != std::string::npos) {
    errs.add(name.Mark(), "name",
             quote_value(name.Scalar()) + " contains '/' or whitespace; use '-' to separate words");
  } else {
    spec.name = name.Scalar();
    spec.id = suite + "/" + spec.name;
    errs.case_label = "case '" + spec.id + "'";
  }

  const YAML::Node kind = lookup(node, "kind");
  if (!kind.IsDefined() || kind.IsNull()) {
    errs.add(node.Mark(), "kind", "is required (layout, mesh, ...)");
  } else if (!kind.IsScalar()) {
    errs.add(kind.Mark(), "kind", "expected a string, got " + describe_node(kind));
  } else {
    spec.kind = kind.Scalar();
  }

  const YAML::Node tags = lookup(node, "tags");
  if (tags.IsDefined() && !tags.IsNull()) {
    if (!tags.IsSequence()) {
      errs.add(tags.Mark(), "tags", "expected a list of strings, got " + describe_node(tags));
    } else {
      for (const YAML::Node& tag : tags) {
        if (!tag.IsScalar() || tag.Scalar().empty()) {
          errs.add(tag.Mark(), "tags", "expected a non-empty string, got " + describe_node(tag));
        } else if (const auto control = first_control_character(tag.Scalar())) {
          errs.add(tag.Mark(), "tags",
                   quote_value(tag.Scalar()) + " contains the control character " + *control +
                       "; tags are printed and typed on the command line");
        } else {
          spec.tags.push_back(tag.Scalar());
        }
      }
    }
  }
  if (out.errors.size() == errors_before) out.cases.push_back(std::move(spec));
}

}  // namespace

CaseSpec& CaseSpec::operator=(const CaseSpec& other) {
  file = other.file;
  mark = other.mark;
  suite = other.suite;
  name = other.name;
  id = other.id;
  kind = other.kind;
  tags = other.tags;
  node.reset(other.node);
  return *this;
}

std::vector<std::string> find_case_files(const std::vector<std::string>& paths,
                                         std::vector<std::string>& errors) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(path, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_regular_file() && is_case_file(it->path())) found.push_back(it->path().string());
      }
      if (ec) errors.push_back(printable(path) + ": cannot read the directory: " + ec.message());
      std::sort(found.begin(), found.end());
      if (found.empty() && !ec) {
        errors.push_back(printable(path) + ": no *.yaml or *.yml case files in this directory");
      }
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(path, ec)) {
      files.push_back(path);
    } else {
      errors.push_back(printable(path) + ": no such case file or directory");
    }
  }
  return files;
}

namespace {

// The suite's name, or an error: from `suite:` or else the file's stem.
std::optional<std::string> read_suite(const YAML::Node& root, const std::string& file,
                                      std::vector<std::string>& errors) {
  const YAML::Node suite_node = lookup(root, "suite");
  if (!suite_node.IsDefined() || suite_node.IsNull()) {
    std::string stem = fs::path(file).stem().string();
    if (const auto control = first_control_character(stem)) {
      errors.push_back(location(file, root.Mark()) +
                       ": the file's name, the default suite name, contains the control "
                       "character " +
                       *control + "; rename the file or set 'suite:'");
      return std::nullopt;
    }
    return stem;
  }
  if (!suite_node.IsScalar() || suite_node.Scalar().empty() ||
      suite_node.Scalar().find('/') != std::string::npos) {
    errors.push_back(location(file, suite_node.Mark()) +
                     ": key 'suite': expected a non-empty string without '/', got " +
                     describe_node(suite_node));
    return std::nullopt;
  }
  if (const auto control = first_control_character(suite_node.Scalar())) {
    errors.push_back(location(file, suite_node.Mark()) + ": key 'suite': " +
                     quote_value(suite_node.Scalar()) + " contains the control character " +
                     *control + "; suite names are printed and typed on the command line");
    return std::nullopt;
  }
  return suite_node.Scalar();
}

// The number of combinations of `axes`, or nullopt past `cap` (computed without overflow).
std::optional<std::size_t> count_combinations(
    const std::vector<std::pair<std::string, std::vector<YAML::Node>>>& axes, std::size_t cap) {
  std::size_t combinations = 1;
  for (const auto& axis : axes) {
    if (combinations > cap / axis.second.size()) return std::nullopt;
    combinations *= axis.second.size();
  }
  return combinations <= cap ? std::optional(combinations) : std::nullopt;
}

// "k0: 10 x k1: 10 = 100", or with the product past what a size_t holds, "... = more than N".
std::string describe_combinations(
    const std::vector<std::pair<std::string, std::vector<YAML::Node>>>& axes) {
  std::string text;
  double product = 1;
  for (const auto& axis : axes) {
    text += (text.empty() ? "" : " x ") + printable(axis.first) + ": " +
            std::to_string(axis.second.size());
    product *= static_cast<double>(axis.second.size());
  }
  char count[64];
  std::snprintf(count, sizeof count, product < 1e15 ? "%.0f" : "%.3g", product);
  return text + " = " + count;
}

// load_case_text without the final pass over its messages.
void load_checked_text(const std::string& text, const std::string& file, LoadedCases& out,
                       const CaseFileLimits& limits) {
  std::vector<std::string> problems = prescan_case_text(text, file, limits);
  if (!problems.empty()) {
    out.errors.insert(out.errors.end(), problems.begin(), problems.end());
    return;
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    out.errors.push_back(location(file, e.mark) + ": invalid YAML: " + e.msg);
    return;
  }
  if (!root.IsMap()) {
    out.errors.push_back(location(file, root.Mark()) +
                         ": expected a mapping with 'cases' (and optionally 'suite', 'defaults')");
    return;
  }
  const std::vector<std::string> file_keys = {"suite", "defaults", "cases"};
  bool usable = true;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (std::find(file_keys.begin(), file_keys.end(), key) == file_keys.end()) {
      out.errors.push_back(location(file, it->first.Mark()) + ": key " + quote_value(key) +
                           ": unknown top-level key" + did_you_mean(key, file_keys) +
                           "; a case file has suite, defaults and cases");
      usable = false;
    }
  }

  const std::optional<std::string> suite = read_suite(root, file, out.errors);
  usable = usable && suite.has_value();

  const YAML::Node defaults = lookup(root, "defaults");
  if (defaults.IsDefined() && !defaults.IsNull()) {
    if (!defaults.IsMap()) {
      out.errors.push_back(location(file, defaults.Mark()) +
                           ": key 'defaults': expected a mapping, got " + describe_node(defaults));
      usable = false;
    } else {
      for (const char* key : {"name", "matrix"}) {
        const YAML::Node key_node = lookup_key_node(defaults, key);
        if (key_node.IsDefined()) {
          out.errors.push_back(location(file, key_node.Mark()) + ": key 'defaults." + key +
                               "': not allowed in defaults; it belongs to each case");
          usable = false;
        }
      }
    }
  }

  const YAML::Node cases = lookup(root, "cases");
  if (!cases.IsDefined() || !cases.IsSequence()) {
    out.errors.push_back(location(file, cases.IsDefined() ? cases.Mark() : root.Mark()) +
                         ": key 'cases': expected a list of cases, got " + describe_node(cases));
    return;
  }
  if (cases.size() == 0) {
    out.errors.push_back(location(file, cases.Mark()) +
                         ": key 'cases': the list is empty; a case file holds at least one case");
    return;
  }
  if (!usable) return;

  std::size_t nodes_left = limits.max_case_nodes;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const YAML::Node case_node = cases[i];
    CaseErrors errs{file, "case #" + std::to_string(i + 1), out.errors};
    if (!case_node.IsMap()) {
      out.errors.push_back(location(file, case_node.Mark()) + ": case #" + std::to_string(i + 1) +
                           ": expected a mapping with name, kind, ..., got " +
                           describe_node(case_node));
      continue;
    }
    const auto axes = read_matrix(case_node, errs);
    if (!axes) continue;
    const std::optional<std::size_t> combinations =
        count_combinations(*axes, limits.max_matrix_combinations);
    if (!combinations) {
      // Named by its written name (a ${var} left as written), so that the message says which
      // case; the name is checked, and quoted for display, where the case expands.
      if (const YAML::Node name = lookup(case_node, "name"); name.IsScalar() && suite) {
        errs.case_label = "case " + quote_value(*suite + "/" + name.Scalar());
      }
      errs.add(lookup(case_node, "matrix").Mark(), "matrix",
               "expands to " + describe_combinations(*axes) + " combinations, above the limit of " +
                   std::to_string(limits.max_matrix_combinations) +
                   " per case; split the case or shorten its lists");
      continue;
    }
    std::vector<bool> varying;
    for (const auto& axis : *axes) varying.push_back(axis.second.size() > 1);
    for (std::size_t c = 0; c < *combinations; ++c) {
      // The first matrix key varies slowest.
      std::vector<std::size_t> picks(axes->size());
      std::size_t rest = c;
      for (std::size_t a = axes->size(); a-- > 0;) {
        picks[a] = rest % (*axes)[a].second.size();
        rest /= (*axes)[a].second.size();
      }
      Bindings bindings;
      for (std::size_t a = 0; a < axes->size(); ++a) {
        bindings.emplace_back((*axes)[a].first, (*axes)[a].second[picks[a]]);
      }
      const std::size_t before = out.errors.size();
      CaseBuilder builder(bindings, varying, errs, nodes_left);
      const YAML::Node expanded = builder.build(case_node, defaults);
      if (!builder.within_budget()) {
        errs.add(case_node.Mark(), axes->empty() ? "cases" : "matrix",
                 "the file's cases, defaults merged and matrices expanded, pass " +
                     std::to_string(limits.max_case_nodes) +
                     " YAML nodes, the limit for a case file; split the file or shorten its "
                     "matrices");
        return;
      }
      if (out.errors.size() != before) break;  // the same mistake in every combination
      add_case(expanded, file, *suite, i, out);
    }
  }
}

}  // namespace

void load_case_text(const std::string& text, const std::string& file, LoadedCases& out,
                    const CaseFileLimits& limits) {
  const std::size_t errors_before = out.errors.size();
  load_checked_text(text, file, out, limits);
  // Every message about this file is printable and of bounded line length, whatever it quotes.
  for (std::size_t i = errors_before; i < out.errors.size(); ++i) {
    out.errors[i] = message_text(out.errors[i]);
  }
}

void check_unique_ids(LoadedCases& loaded) {
  std::map<std::string, const CaseSpec*> first;
  std::vector<CaseSpec> unique;
  std::vector<std::string> duplicates;
  for (const CaseSpec& spec : loaded.cases) {
    auto [it, inserted] = first.emplace(spec.id, &spec);
    if (!inserted) {
      const YAML::Node name = lookup(spec.node, "name");
      duplicates.push_back(location(spec.file, name.Mark()) + ": case '" + spec.id +
                           "': key 'name': duplicate case id, first defined at " +
                           location(it->second->file, lookup(it->second->node, "name").Mark()) +
                           "; names must be unique in a suite");
    }
  }
  loaded.errors.insert(loaded.errors.end(), duplicates.begin(), duplicates.end());
}

LoadedCases load_cases(const std::vector<std::string>& paths, const CaseFileLimits& limits) {
  LoadedCases loaded;
  for (const std::string& file : find_case_files(paths, loaded.errors)) {
    std::error_code ec;
    const std::uintmax_t bytes = fs::file_size(file, ec);
    if (!ec && bytes > limits.max_file_bytes) {
      // Refused before reading: the text check would say the same after reading it all.
      loaded.errors.push_back(printable(file) + ": the file has " + std::to_string(bytes) +
                              " bytes, above the limit of " +
                              std::to_string(limits.max_file_bytes) +
                              " bytes for a case file; split it");
      continue;
    }
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      loaded.errors.push_back(printable(file) + ": cannot open the file for reading");
      continue;
    }
    std::ostringstream text;
    text << in.rdbuf();
    load_case_text(text.str(), file, loaded, limits);
  }
  check_unique_ids(loaded);
  return loaded;
}

}  // namespace meshgate::runner

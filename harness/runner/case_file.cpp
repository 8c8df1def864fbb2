#include "case_file.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "diagnostics.hpp"

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

// Substitutes "${x}" in one scalar. Returns the node that replaces the whole scalar when it is
// exactly "${x}" (so the matrix value keeps its YAML type), otherwise edits the text in place.
std::optional<YAML::Node> substitute_scalar(YAML::Node scalar, const Bindings& bindings,
                                            std::string_view top_key, const CaseErrors& errs) {
  const std::string text = scalar.Scalar();
  if (text.find("${") == std::string::npos) return std::nullopt;
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t open = text.find("${", pos);
    if (open == std::string::npos) {
      out += text.substr(pos);
      break;
    }
    const std::size_t close = text.find('}', open);
    if (close == std::string::npos) {
      errs.add(scalar.Mark(), top_key, "unterminated '${' in '" + text + "'");
      return std::nullopt;
    }
    const std::string var = text.substr(open + 2, close - open - 2);
    const auto binding = std::find_if(bindings.begin(), bindings.end(),
                                      [&](const auto& b) { return b.first == var; });
    if (binding == bindings.end()) {
      std::vector<std::string> names;
      for (const auto& b : bindings) names.push_back(b.first);
      std::string message = "'${" + var + "}' is not a matrix key";
      if (names.empty()) {
        message += ": the case has no matrix";
      } else {
        message += did_you_mean(var, names);
      }
      errs.add(scalar.Mark(), top_key, message);
      return std::nullopt;
    }
    if (open == 0 && close == text.size() - 1) return binding->second;
    out += text.substr(pos, open - pos);
    out += flow_text(binding->second);
    pos = close + 1;
  }
  scalar = out;  // set_scalar keeps the node's position
  return std::nullopt;
}

void substitute(YAML::Node value, const Bindings& bindings, std::string_view top_key,
                const CaseErrors& errs) {
  if (value.IsScalar()) {
    // Assigning through this handle re-points the node inside the tree: the value takes
    // the matrix entry's type (and its position in the file).
    if (auto replacement = substitute_scalar(value, bindings, top_key, errs)) value = *replacement;
  } else if (value.IsMap()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      substitute(it->second, bindings, top_key, errs);
    }
  } else if (value.IsSequence()) {
    for (std::size_t i = 0; i < value.size(); ++i) substitute(value[i], bindings, top_key, errs);
  }
}

// Substitutes in every key of a case except the matrix itself.
void substitute_case(YAML::Node case_node, const Bindings& bindings, const CaseErrors& errs) {
  for (auto it = case_node.begin(); it != case_node.end(); ++it) {
    const std::string key = it->first.as<std::string>("");
    if (key != "matrix") substitute(it->second, bindings, key, errs);
  }
}

// Puts `defaults` under the case: the case's own keys win, tags are united.
void merge_defaults(YAML::Node case_node, const YAML::Node& defaults) {
  if (!defaults.IsMap()) return;
  for (auto it = defaults.begin(); it != defaults.end(); ++it) {
    const std::string key = it->first.as<std::string>("");
    const YAML::Node own = lookup(case_node, key);
    if (!own.IsDefined()) {
      // Inserting the defaults' own key and value nodes keeps their positions for errors.
      case_node.force_insert(it->first, it->second);
    } else if (key == "tags" && own.IsSequence() && it->second.IsSequence()) {
      YAML::Node tags = own;
      const YAML::Node default_tags = it->second;
      for (const YAML::Node& tag : default_tags) {
        bool present = false;
        for (const YAML::Node& have : own) present = present || have.Scalar() == tag.Scalar();
        if (!present) tags.push_back(tag);
      }
    }
  }
}

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
  } else if (name.Scalar().find_first_of("/ \t") != std::string::npos) {
    errs.add(name.Mark(), "name",
             "'" + name.Scalar() + "' contains '/' or whitespace; use '-' to separate words");
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
      if (ec) errors.push_back(path + ": cannot read the directory: " + ec.message());
      std::sort(found.begin(), found.end());
      if (found.empty() && !ec) {
        errors.push_back(path + ": no *.yaml or *.yml case files in this directory");
      }
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(path, ec)) {
      files.push_back(path);
    } else {
      errors.push_back(path + ": no such case file or directory");
    }
  }
  return files;
}

void load_case_text(const std::string& text, const std::string& file, LoadedCases& out) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
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
    const std::string key = it->first.as<std::string>("");
    if (std::find(file_keys.begin(), file_keys.end(), key) == file_keys.end()) {
      out.errors.push_back(location(file, it->first.Mark()) + ": key '" + key +
                           "': unknown top-level key" + did_you_mean(key, file_keys) +
                           "; a case file has suite, defaults and cases");
      usable = false;
    }
  }

  std::string suite = fs::path(file).stem().string();
  const YAML::Node suite_node = lookup(root, "suite");
  if (suite_node.IsDefined() && !suite_node.IsNull()) {
    if (!suite_node.IsScalar() || suite_node.Scalar().empty() ||
        suite_node.Scalar().find('/') != std::string::npos) {
      out.errors.push_back(location(file, suite_node.Mark()) +
                           ": key 'suite': expected a non-empty string without '/', got " +
                           describe_node(suite_node));
      usable = false;
    } else {
      suite = suite_node.Scalar();
    }
  }

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
  if (!usable) return;

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
    if (axes->empty()) {
      merge_defaults(case_node, defaults);
      const std::size_t before = out.errors.size();
      substitute_case(case_node, {}, errs);
      if (out.errors.size() == before) add_case(case_node, file, suite, i, out);
      continue;
    }
    // Each combination edits its own tree: parsing the text again gives fresh nodes that keep
    // their line and column, which a copy made in memory would lose.
    std::size_t combinations = 1;
    for (const auto& axis : *axes) combinations *= axis.second.size();
    for (std::size_t c = 0; c < combinations; ++c) {
      const YAML::Node fresh_root = YAML::Load(text);
      YAML::Node node = fresh_root["cases"][i];
      const YAML::Node fresh_matrix = lookup(node, "matrix");
      // The first matrix key varies slowest. Indexes first: a YAML::Node must never be
      // assigned or swapped inside a container, as that rewrites the node it refers to.
      std::vector<std::size_t> picks(axes->size());
      std::size_t rest = c;
      for (std::size_t a = axes->size(); a-- > 0;) {
        picks[a] = rest % (*axes)[a].second.size();
        rest /= (*axes)[a].second.size();
      }
      Bindings bindings;
      for (std::size_t a = 0; a < axes->size(); ++a) {
        const std::string& key = (*axes)[a].first;
        const YAML::Node values = lookup(fresh_matrix, key);
        bindings.emplace_back(key, values.IsSequence() ? values[picks[a]] : values);
      }
      merge_defaults(node, lookup(fresh_root, "defaults"));
      const std::size_t before = out.errors.size();
      substitute_case(node, bindings, errs);
      if (out.errors.size() != before) break;  // the same mistake in every combination
      add_case(node, file, suite, i, out);
    }
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
                           "; names must be unique in a suite (use ${...} with a matrix)");
    }
  }
  loaded.errors.insert(loaded.errors.end(), duplicates.begin(), duplicates.end());
}

LoadedCases load_cases(const std::vector<std::string>& paths) {
  LoadedCases loaded;
  for (const std::string& file : find_case_files(paths, loaded.errors)) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      loaded.errors.push_back(file + ": cannot open the file for reading");
      continue;
    }
    std::ostringstream text;
    text << in.rdbuf();
    load_case_text(text.str(), file, loaded);
  }
  check_unique_ids(loaded);
  return loaded;
}

}  // namespace meshgate::runner

#include "yaml_prescan.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include "diagnostics.hpp"

namespace meshgate::runner {
namespace {

// The encoding of text that is not UTF-8, recognised as YAML 1.2 (§5.2) does: by its
// byte-order mark, or by where the zero bytes of its first ASCII characters fall.
std::optional<std::string> other_encoding(std::string_view text) {
  const auto byte = [&](std::size_t i) {
    return i < text.size() ? static_cast<int>(static_cast<unsigned char>(text[i])) : -1;
  };
  const auto starts = [&](std::initializer_list<int> bytes) {
    std::size_t i = 0;
    for (const int b : bytes) {
      if (byte(i++) != b) return false;
    }
    return true;
  };
  if (starts({0x00, 0x00, 0xFE, 0xFF})) return "UTF-32 (big-endian, with a byte-order mark)";
  if (starts({0xFF, 0xFE, 0x00, 0x00})) return "UTF-32 (little-endian, with a byte-order mark)";
  if (starts({0xFE, 0xFF})) return "UTF-16 (big-endian, with a byte-order mark)";
  if (starts({0xFF, 0xFE})) return "UTF-16 (little-endian, with a byte-order mark)";
  if (text.size() >= 4 && starts({0x00, 0x00, 0x00}) && byte(3) != 0) return "UTF-32 (big-endian)";
  if (text.size() >= 4 && byte(0) != 0 && byte(1) == 0 && byte(2) == 0 && byte(3) == 0) {
    return "UTF-32 (little-endian)";
  }
  if (text.size() >= 2 && byte(0) == 0 && byte(1) != 0) return "UTF-16 (big-endian)";
  if (text.size() >= 2 && byte(0) != 0 && byte(1) == 0) return "UTF-16 (little-endian)";
  return std::nullopt;
}

// The first character of `text` that a case file must not hold: a byte that is not UTF-8, or a
// control character other than tab and the line breaks (line feed, carriage return).
struct BadCharacter {
  std::size_t offset;
  std::string what;
};

std::optional<BadCharacter> find_bad_character(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t length = utf8_sequence_length(text.substr(i));
    if (length == 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(text[i]));
      return BadCharacter{i, std::string("a byte that is not UTF-8 (") + hex + ")"};
    }
    if (is_control_character(text.substr(i, length)) && text[i] != '\t' && text[i] != '\n' &&
        text[i] != '\r') {
      return BadCharacter{i, "the control character " + code_point_name(text.substr(i, length))};
    }
    i += length;
  }
  return std::nullopt;
}

// yaml-cpp's position of byte `offset`: 0-based line and column, the column counted in bytes.
YAML::Mark mark_at(std::string_view text, std::size_t offset) {
  YAML::Mark mark;
  mark.pos = static_cast<int>(offset);
  const std::string_view before = text.substr(0, offset);
  mark.line = static_cast<int>(std::count(before.begin(), before.end(), '\n'));
  const std::size_t line_start = before.rfind('\n');
  mark.column =
      static_cast<int>(line_start == std::string_view::npos ? offset : offset - line_start - 1);
  return mark;
}

// Thrown by the handler to stop the parser at the first problem it cannot read past.
struct StopScan {};

class PrescanHandler : public YAML::EventHandler {
 public:
  PrescanHandler(std::string_view file, const CaseFileLimits& limits,
                 std::vector<std::string>& errors)
      : file_(file), limits_(limits), errors_(errors) {}

  std::size_t documents() const { return documents_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ > 1) {
      stop(mark,
           "a second YAML document starts here; a case file holds one document (remove the "
           "'---' line or move the cases into the first document)");
    }
  }
  void OnDocumentEnd() override {}

  void OnAnchor(const YAML::Mark& mark, const std::string& name) override {
    pending_anchor_ = {name, mark};
  }

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    enter_node(mark, nullptr, 0, 1);
    define_anchor(anchor, 1, 1, std::nullopt);
    add_to_parent(1, 1);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    check_tag(mark, tag);
    // Escapes in quoted strings ("\e", "\x07", "\u0085") reach past the check of the raw text.
    if (const std::optional<BadCharacter> bad = find_bad_character(value)) {
      stop(mark, "a string holds " + bad->what +
                     " (written as an escape); case files hold no control characters but tab "
                     "and line breaks");
    }
    enter_node(mark, &value, 0, 1);
    define_anchor(anchor, 1, 1, value);
    add_to_parent(1, 1);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (anchor >= anchors_.size()) return;  // yaml-cpp rejects unknown anchors itself
    const Anchor& target = anchors_[anchor];
    if (target.open) {
      stop(mark, "alias '*" + printable(target.name) + "' refers to the anchor '&" +
                     printable(target.name) + "' at line " + std::to_string(target.mark.line + 1) +
                     " that contains it: the value would contain itself forever");
    }
    const std::string alias = "alias '*" + printable(target.name) + "'";
    enter_node(mark, target.scalar ? &*target.scalar : nullptr, target.nodes, target.height, alias);
    add_to_parent(target.nodes, target.height);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    check_tag(mark, tag);
    open_collection(mark, anchor, false);
  }
  void OnSequenceEnd() override { close_collection(); }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    check_tag(mark, tag);
    open_collection(mark, anchor, true);
  }
  void OnMapEnd() override { close_collection(); }

 private:
  // A tag asks a YAML loader for a type: yaml-cpp ignores it, so `kind: !!python/object:x
  // layout` would load as the kind "layout" and a reader of the file would be misled. Only
  // the untagged forms ("?" plain, "!" quoted) and YAML's own core types may appear.
  void check_tag(const YAML::Mark& mark, const std::string& tag) {
    static constexpr std::string_view core = "tag:yaml.org,2002:";
    static constexpr std::string_view core_types[] = {"str", "int", "float", "bool", "null",
                                                      "seq", "map"};
    if (tag.empty() || tag == "?" || tag == "!") return;
    if (tag.compare(0, core.size(), core) == 0) {
      const std::string_view type = std::string_view(tag).substr(core.size());
      for (const std::string_view known : core_types) {
        if (type == known) return;
      }
    }
    const std::string shown =
        tag.compare(0, core.size(), core) == 0 ? "!!" + tag.substr(core.size()) : tag;
    errors_.push_back(location(file_, mark) + ": the YAML tag " + quote_value(shown) +
                      " is not allowed; case files use no tags but YAML's core types (!!str, "
                      "!!int, !!float, !!bool, !!null): write the value plainly");
  }

  struct Anchor {
    std::string name;
    YAML::Mark mark;
    bool open = false;
    std::size_t nodes = 0;   // aliases inside expanded
    std::size_t height = 0;  // levels of nesting, 1 for a scalar
    std::optional<std::string> scalar;
  };
  struct Collection {
    bool is_map = false;
    YAML::anchor_t anchor = YAML::NullAnchor;
    std::size_t nodes = 1;
    std::size_t height = 1;
    bool next_is_key = true;                 // mappings alternate key, value
    std::map<std::string, YAML::Mark> keys;  // mappings: each key's first place
  };

  // A limit stops the scan, and its message comes alone: what was found before it (keys
  // inside a value nested too deep, say) is a product of the same input.
  [[noreturn]] void stop(const YAML::Mark& mark, const std::string& message) {
    errors_.assign({location(file_, mark) + ": " + message});
    throw StopScan{};
  }

  // Enters a node `height` levels deep, of which `alias_nodes` come from alias expansion (0
  // for a node written out), and checks it as a key when it is one (a bad key is reported and
  // the scan goes on).
  void enter_node(const YAML::Mark& mark, const std::string* scalar, std::size_t alias_nodes,
                  std::size_t height, const std::string& what = "") {
    if (alias_nodes == 0 && ++written_nodes_ > limits_.max_written_nodes) {
      stop(mark, "the file holds more than " + std::to_string(limits_.max_written_nodes) +
                     " YAML nodes, the limit for a case file (more than its cases may hold "
                     "once expanded); split the file");
    }
    alias_nodes_ += alias_nodes;
    if (alias_nodes_ > limits_.max_alias_nodes) {
      stop(mark, (what.empty() ? "this value" : what) + " brings the YAML nodes that aliases add "
                     "to the file past " + std::to_string(limits_.max_alias_nodes) +
                     ", the limit for a case file (it guards against alias bombs); write the "
                     "values out or split the file");
    }
    if (stack_.size() + height > limits_.max_depth) {
      stop(mark, (what.empty() ? "this value" : what) + " nests deeper than " +
                     std::to_string(limits_.max_depth) +
                     " levels of mappings and lists (aliases expanded), the limit for a case "
                     "file");
    }
    if (stack_.empty() || !stack_.back().is_map) return;
    Collection& parent = stack_.back();
    const bool is_key = parent.next_is_key;
    parent.next_is_key = !parent.next_is_key;
    if (!is_key) return;
    if (scalar == nullptr) {
      errors_.push_back(location(file_, mark) +
                        ": a mapping key must be a string; case files have no null, list or "
                        "mapping keys");
      return;
    }
    const auto [first, inserted] = parent.keys.emplace(*scalar, mark);
    if (!inserted) {
      errors_.push_back(location(file_, mark) + ": key " + quote_value(*scalar) +
                        ": defined twice in this mapping, first at line " +
                        std::to_string(first->second.line + 1) +
                        "; remove one (YAML keeps only one of them)");
    }
  }

  void define_anchor(YAML::anchor_t anchor, std::size_t nodes, std::size_t height,
                     std::optional<std::string> scalar) {
    if (anchor == YAML::NullAnchor) return;
    Anchor& a = anchor_slot(anchor);
    a.open = false;
    a.nodes = nodes;
    a.height = height;
    a.scalar = std::move(scalar);
  }

  Anchor& anchor_slot(YAML::anchor_t anchor) {
    if (anchors_.size() <= anchor) anchors_.resize(anchor + 1);
    Anchor& a = anchors_[anchor];
    a.name = pending_anchor_.first;
    a.mark = pending_anchor_.second;
    return a;
  }

  void add_to_parent(std::size_t nodes, std::size_t height) {
    if (stack_.empty()) return;
    stack_.back().nodes += nodes;
    stack_.back().height = std::max(stack_.back().height, height + 1);
  }

  void open_collection(const YAML::Mark& mark, YAML::anchor_t anchor, bool is_map) {
    enter_node(mark, nullptr, 0, 1);
    if (anchor != YAML::NullAnchor) anchor_slot(anchor).open = true;
    Collection collection;
    collection.is_map = is_map;
    collection.anchor = anchor;
    stack_.push_back(std::move(collection));
  }

  void close_collection() {
    const Collection done = std::move(stack_.back());
    stack_.pop_back();
    if (done.anchor != YAML::NullAnchor && done.anchor < anchors_.size()) {
      Anchor& a = anchors_[done.anchor];
      a.open = false;
      a.nodes = done.nodes;
      a.height = done.height;
    }
    add_to_parent(done.nodes, done.height);
  }

  std::string_view file_;
  const CaseFileLimits& limits_;
  std::vector<std::string>& errors_;
  std::size_t documents_ = 0;
  std::size_t written_nodes_ = 0;
  std::size_t alias_nodes_ = 0;
  std::vector<Collection> stack_;
  std::vector<Anchor> anchors_;  // by yaml-cpp's anchor number (1, 2, ... in file order)
  std::pair<std::string, YAML::Mark> pending_anchor_;
};

}  // namespace

std::vector<std::string> prescan_case_text(std::string_view text, std::string_view file,
                                           const CaseFileLimits& limits) {
  const std::string where = printable(file);
  if (text.size() > limits.max_file_bytes) {
    return {where + ": the file has " + std::to_string(text.size()) +
            " bytes, above the limit of " + std::to_string(limits.max_file_bytes) +
            " bytes for a case file; split it"};
  }
  if (const std::optional<std::string> encoding = other_encoding(text)) {
    return {where + ": the file is encoded as " + *encoding +
            "; case files must be UTF-8 (convert it, e.g. with iconv -t UTF-8)"};
  }
  constexpr std::string_view utf8_bom = "\xEF\xBB\xBF";
  const std::size_t start = text.substr(0, utf8_bom.size()) == utf8_bom ? utf8_bom.size() : 0;
  if (const std::optional<BadCharacter> bad = find_bad_character(text.substr(start))) {
    return {location(file, mark_at(text.substr(start), bad->offset)) + ": " + bad->what +
            "; case files are UTF-8 text with no control characters but tab and line breaks"};
  }

  std::vector<std::string> errors;
  std::istringstream in{std::string(text)};
  YAML::Parser parser(in);
  PrescanHandler handler(file, limits, errors);
  try {
    while (parser.HandleNextDocument(handler)) {
    }
  } catch (const StopScan&) {
  } catch (const YAML::Exception& e) {
    // What the handler saw just before a syntax error is often a product of it.
    errors.assign({location(file, e.mark) + ": invalid YAML: " + e.msg});
  }
  if (errors.empty() && handler.documents() == 0) {
    errors.push_back(where +
                     ": the file is empty; a case file is a mapping with 'cases' (and optionally "
                     "'suite', 'defaults')");
  }
  return errors;
}

}  // namespace meshgate::runner

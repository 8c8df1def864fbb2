// CaseNode: reading a case's keys records them, so that every key nobody asked for can be
// reported as unknown (with a suggestion) after the kind has parsed the case.
#include <algorithm>
#include <string>
#include <vector>

#include "case_kind.hpp"
#include "diagnostics.hpp"

namespace meshgate::runner {

std::string_view to_string(Status s) {
  switch (s) {
    case Status::pass:
      return "pass";
    case Status::fail:
      return "fail";
    case Status::error:
      return "error";
    case Status::skip:
      return "skip";
  }
  return "error";
}

namespace {

// Library messages quote the case's values whole (an unknown name, a malformed layout), which
// could fill the message line before its remedy. Each scalar of `value` and of `around` (the
// mapping it sits in, whose other values a message may quote too) longer than a quoted value
// may be is cut in `message` as quote_value cuts it.
std::string shorten_quoted_values(const YAML::Node& value, const YAML::Node& around,
                                  std::string_view message) {
  std::vector<std::string> long_scalars;
  std::vector<YAML::Node> pending{around, value};
  // The walk is bounded: a value may be a list of a million items.
  for (int visited = 0; !pending.empty() && visited < 10000; ++visited) {
    const YAML::Node n = pending.back();
    pending.pop_back();
    if (!n.IsDefined()) continue;
    if (n.IsScalar() && n.Scalar().size() > quoted_value_limit) long_scalars.push_back(n.Scalar());
    if (n.IsSequence())
      for (const YAML::Node& item : n) pending.push_back(item);
    if (n.IsMap())
      for (auto it = n.begin(); it != n.end(); ++it) {
        // expect_error is a substring the message must contain: cut, it could never match.
        if (it->first.IsScalar() && it->first.Scalar() == "expect_error") continue;
        pending.push_back(it->first);
        pending.push_back(it->second);
      }
  }
  // Longest first, so that a value containing another is cut whole.
  std::sort(long_scalars.begin(), long_scalars.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  long_scalars.erase(std::unique(long_scalars.begin(), long_scalars.end()), long_scalars.end());
  std::string out(message);
  for (const std::string& scalar : long_scalars) {
    const std::string cut = shorten_value(scalar);
    for (std::size_t at = out.find(scalar); at != std::string::npos;
         at = out.find(scalar, at + cut.size()))
      out.replace(at, scalar.size(), cut);
  }
  return out;
}

}  // namespace

CaseNode::CaseNode(YAML::Node node, std::string file, std::string case_id, std::string key_path)
    : node_(std::move(node)),
      file_(std::move(file)),
      case_id_(std::move(case_id)),
      key_path_(std::move(key_path)),
      read_keys_(std::make_shared<std::vector<std::string>>()),
      child_paths_(std::make_shared<std::vector<std::string>>()) {}

CaseNode& CaseNode::operator=(const CaseNode& other) {
  node_.reset(other.node_);
  file_ = other.file_;
  case_id_ = other.case_id_;
  key_path_ = other.key_path_;
  read_keys_ = other.read_keys_;
  child_paths_ = other.child_paths_;
  return *this;
}

YAML::Node CaseNode::value_of(std::string_view key) const {
  // Const access: yaml-cpp's non-const operator[] would insert the key.
  const YAML::Node& map = node_;
  if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

void CaseNode::note_known(std::string_view key) const {
  std::string path = key_path_ + std::string(key);
  if (std::find(read_keys_->begin(), read_keys_->end(), path) == read_keys_->end()) {
    read_keys_->push_back(std::move(path));
  }
}

bool CaseNode::has(std::string_view key) const {
  // Asking about a key means the kind knows it: it is not reported as unknown.
  note_known(key);
  const YAML::Node value = value_of(key);
  return value.IsDefined();
}

YAML::Node CaseNode::raw(std::string_view key) {
  note_known(key);
  return value_of(key);
}

CaseNode CaseNode::child(std::string_view key) {
  YAML::Node value = raw(key);
  if (!value.IsDefined() || value.IsNull()) fail(key, "is required (a mapping)");
  if (!value.IsMap()) fail_wrong_type(value, key, "a mapping");
  const std::string path = key_path_ + std::string(key);
  if (std::find(child_paths_->begin(), child_paths_->end(), path) == child_paths_->end()) {
    child_paths_->push_back(path);
  }
  CaseNode nested(value, file_, case_id_, path + ".");
  nested.read_keys_ = read_keys_;
  nested.child_paths_ = child_paths_;
  return nested;
}

namespace detail {
bool is_integer_literal(const YAML::Node& value) {
  if (!value.IsScalar() || value.Tag() == "!") return false;
  const std::string& text = value.Scalar();
  const std::size_t digits = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  return text.size() > digits &&
         std::all_of(text.begin() + static_cast<std::ptrdiff_t>(digits), text.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}
}  // namespace detail

void CaseNode::fail(std::string_view key, std::string_view message) const {
  const YAML::Node value = value_of(key);
  fail_at(value.IsDefined() ? value : node_, key, message);
}

void CaseNode::fail_at(const YAML::Node& node, std::string_view key,
                       std::string_view message) const {
  YAML::Mark mark = node.IsDefined() ? node.Mark() : YAML::Mark::null_mark();
  if (mark.is_null()) mark = node_.Mark();
  // Kinds pass on library messages that quote the case's text: printed as they come, a cut
  // character or an escape sequence would reach the terminal, and a long value would push the
  // rest of the message past the line limit.
  throw InputError(message_text(location(file_, mark) + ": case '" + case_id_ + "': key '" +
                                key_path_ + std::string(key) +
                                "': " + shorten_quoted_values(node, node_, message)));
}

void CaseNode::fail_wrong_type(const YAML::Node& value, std::string_view key,
                               std::string_view expected) const {
  std::string hint;
  const bool wants_list = expected.rfind("a list", 0) == 0;
  if (value.IsSequence() && !wants_list) {
    // A list where one value belongs is usually a sweep meant for the matrix.
    const std::string leaf(key.substr(key.rfind('.') == std::string_view::npos
                                          ? 0
                                          : key.rfind('.') + 1));
    hint = "; to run the case once per value, list them under matrix: {" + leaf +
           ": [...]} and write " + leaf + ": \"${" + leaf + "}\"";
  } else if (value.IsScalar() && value.Tag() == "!" && expected != "a string") {
    hint = " (quoted, so it is text: write it without quotes)";
  }
  fail_at(value, key, "expected " + std::string(expected) + ", got " + describe_node(value) + hint);
}

void CaseNode::collect_unknown(bool close_only, const std::vector<std::string>& vocabulary,
                               std::vector<std::string>& out) const {
  if (!node_.IsMap()) return;
  // Keys asked for (or known to the kind) at this level: the candidates for "did you mean".
  std::vector<std::string> known;
  const auto add_known_at_this_level = [&](const std::string& path) {
    if (path.size() > key_path_.size() && path.compare(0, key_path_.size(), key_path_) == 0 &&
        path.find('.', key_path_.size()) == std::string::npos) {
      std::string key = path.substr(key_path_.size());
      if (std::find(known.begin(), known.end(), key) == known.end()) known.push_back(key);
    }
  };
  for (const std::string& path : *read_keys_) add_known_at_this_level(path);
  for (const std::string& path : vocabulary) add_known_at_this_level(path);
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string key = it->first.as<std::string>("");
    const std::string path = key_path_ + key;
    if (std::find(known.begin(), known.end(), key) != known.end()) {
      if (std::find(child_paths_->begin(), child_paths_->end(), path) != child_paths_->end()) {
        CaseNode nested(it->second, file_, case_id_, path + ".");
        nested.read_keys_ = read_keys_;
        nested.child_paths_ = child_paths_;
        nested.collect_unknown(close_only, vocabulary, out);
      }
      continue;
    }
    const std::optional<std::string> match = closest_match(key, known);
    if (close_only && !match) continue;
    std::string message = location(file_, it->first.Mark()) + ": case '" + case_id_ + "': key '" +
                          path + "': unknown key";
    if (match) {
      message += " (did you mean '" + *match + "'?)";
    } else if (!known.empty()) {
      std::vector<std::string> sorted = known;
      std::sort(sorted.begin(), sorted.end());
      message += "; known keys here: ";
      for (std::size_t i = 0; i < sorted.size(); ++i) message += (i ? ", " : "") + sorted[i];
    }
    out.push_back(message_text(message));
  }
}

std::vector<std::string> CaseNode::unknown_key_errors(
    bool close_only, const std::vector<std::string>& vocabulary) const {
  std::vector<std::string> out;
  collect_unknown(close_only, vocabulary, out);
  return out;
}

void CaseNode::finish() const {
  const std::vector<std::string> errors = unknown_key_errors();
  if (!errors.empty()) throw InputError(errors.front());
}

const std::string& CaseNode::file() const {
  return file_;
}
const std::string& CaseNode::case_id() const {
  return case_id_;
}
const YAML::Node& CaseNode::node() const {
  return node_;
}

}  // namespace meshgate::runner

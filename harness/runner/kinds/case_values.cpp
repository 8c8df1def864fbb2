#include "kinds/case_values.hpp"

#include "core/error.hpp"

namespace meshgate::runner {
namespace {

bool is_quoted(const YAML::Node& node) {
  return node.Tag() == "!";
}

template <class T>
bool try_as(const YAML::Node& node, T& out) {
  try {
    out = node.as<T>();
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}

}  // namespace

nlohmann::json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence: {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& item : node) out.push_back(yaml_to_json(item));
      return out;
    }
    case YAML::NodeType::Map: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& item : node) out[item.first.Scalar()] = yaml_to_json(item.second);
      return out;
    }
    case YAML::NodeType::Scalar: {
      if (is_quoted(node)) return node.Scalar();
      std::int64_t i = 0;
      double d = 0;
      bool b = false;
      if (try_as(node, i)) return i;
      if (try_as(node, d)) return d;
      if (try_as(node, b)) return b;
      return node.Scalar();
    }
    default:
      return nullptr;
  }
}

IntTuple read_int_tuple(const YAML::Node& value, const CaseNode& at, std::string_view key) {
  if (value.IsSequence()) {
    std::vector<IntTuple> elements;
    for (const auto& item : value) elements.push_back(read_int_tuple(item, at, key));
    return IntTuple::tuple(std::move(elements));
  }
  if (!value.IsScalar()) {
    at.fail_at(value, key, "expected an int, a tuple such as \"(1,(1,2))\" or a list");
  }
  std::int64_t i = 0;
  if (!is_quoted(value) && try_as(value, i)) return IntTuple(i);
  return parse_int_tuple(value.Scalar());
}

Layout read_layout(const YAML::Node& value, const CaseNode& at, std::string_view key) {
  if (!value.IsScalar()) {
    at.fail_at(value, key, "expected a layout in CuTe notation such as \"(2,4):(4,1)\"");
  }
  return parse_layout(value.Scalar());
}

std::int64_t read_int(const YAML::Node& value, const CaseNode& at, std::string_view key) {
  std::int64_t i = 0;
  // A quoted "2" is text, though yaml-cpp would read it as the number.
  if (value.IsScalar() && value.Tag() == "!") {
    at.fail_at(value, key, "expected an integer, got the quoted text '" + value.Scalar() +
                               "' (write the number without quotes)");
  }
  if (!value.IsScalar() || !try_as(value, i)) {
    if (const auto too_large = detail::out_of_range<std::int64_t>(value)) {
      at.fail_at(value, key, too_large->second);
    }
    at.fail_at(value, key, "expected an integer");
  }
  return i;
}

std::vector<std::int64_t> read_int_list(const YAML::Node& value, const CaseNode& at,
                                        std::string_view key) {
  if (!value.IsSequence()) at.fail_at(value, key, "expected a list of integers");
  std::vector<std::int64_t> out;
  out.reserve(value.size());
  for (const auto& item : value) out.push_back(read_int(item, at, key));
  return out;
}

nlohmann::json read_nested_ints(const YAML::Node& value, const CaseNode& at, std::string_view key) {
  if (value.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& item : value) out.push_back(read_nested_ints(item, at, key));
    return out;
  }
  return read_int(value, at, key);
}

nlohmann::json rank_tensor_to_json(const RankTensor& t) {
  if (t.shape.empty()) return t.values.empty() ? nlohmann::json() : nlohmann::json(t.values[0]);
  std::size_t next = 0;
  auto build = [&](auto& self, std::size_t dim) -> nlohmann::json {
    nlohmann::json out = nlohmann::json::array();
    for (std::int64_t i = 0; i < t.shape[dim]; ++i) {
      out.push_back(dim + 1 == t.shape.size() ? nlohmann::json(t.values[next++])
                                              : self(self, dim + 1));
    }
    return out;
  };
  return build(build, 0);
}

}  // namespace meshgate::runner

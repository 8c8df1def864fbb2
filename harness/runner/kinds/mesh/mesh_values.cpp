// Small values the mesh kind's files share: nested int lists, change classes, rank lists.
#include <algorithm>
#include <iterator>

#include "kinds/mesh/mesh_case.hpp"

namespace meshgate::runner::mesh_kind {

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

std::optional<ChangeClass> parse_change_class(const std::string& text) {
  for (std::size_t i = 0; i < std::size(kChangeClassNames); ++i) {
    if (text == kChangeClassNames[i]) return static_cast<ChangeClass>(i);
  }
  return std::nullopt;
}

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

std::string shorten(std::string text, std::size_t limit) {
  if (text.size() > limit) text = text.substr(0, limit) + "...";
  return text;
}

std::string error_type(const std::string& message) {
  return message.substr(0, message.find(':'));
}

}  // namespace meshgate::runner::mesh_kind

// The layout kind's op table: each op's name, argument types, result type and library call.

#include "kinds/layout/layout_case.hpp"

namespace meshgate::runner::layout_kind {

const Layout& layout_arg(const std::vector<Arg>& a, std::size_t i) {
  return std::get<Layout>(a[i]);
}
const IntTuple& tuple_arg(const std::vector<Arg>& a, std::size_t i) {
  return std::get<IntTuple>(a[i]);
}
std::int64_t int_arg(const std::vector<Arg>& a, std::size_t i) {
  return std::get<std::int64_t>(a[i]);
}
const std::vector<std::int64_t>& list_arg(const std::vector<Arg>& a, std::size_t i) {
  return std::get<std::vector<std::int64_t>>(a[i]);
}
std::optional<IntTuple> optional_tuple_arg(const std::vector<Arg>& a, std::size_t i) {
  if (i < a.size()) return tuple_arg(a, i);
  return std::nullopt;
}

namespace {

using A = ArgType;
using R = ResultType;
using Args = std::vector<Arg>;

// The ops of the layout algebra (docs/kinds.md, Layouts).
std::vector<OpInfo> algebra_ops() {
  return {
      {"coalesce",
       {A::layout, A::int_tuple},
       1,
       R::layout,
       [](const Args& a) -> Value {
         return a.size() == 2 ? coalesce(layout_arg(a, 0), tuple_arg(a, 1))
                              : coalesce(layout_arg(a, 0));
       }},
      {"filter",
       {A::layout},
       1,
       R::layout,
       [](const Args& a) -> Value { return filter(layout_arg(a, 0)); }},
      {"composition",
       {A::layout, A::layout},
       2,
       R::layout,
       [](const Args& a) -> Value { return composition(layout_arg(a, 0), layout_arg(a, 1)); }},
      {"complement",
       {A::layout, A::integer},
       1,
       R::layout,
       [](const Args& a) -> Value {
         return complement(layout_arg(a, 0), a.size() == 2 ? int_arg(a, 1) : 1);
       }},
      {"right_inverse",
       {A::layout},
       1,
       R::layout,
       [](const Args& a) -> Value { return right_inverse(layout_arg(a, 0)); }},
      {"left_inverse",
       {A::layout},
       1,
       R::layout,
       [](const Args& a) -> Value { return left_inverse(layout_arg(a, 0)); }},
      {"logical_divide",
       {A::layout, A::layout},
       2,
       R::layout,
       [](const Args& a) -> Value { return logical_divide(layout_arg(a, 0), layout_arg(a, 1)); }},
      {"logical_product",
       {A::layout, A::layout},
       2,
       R::layout,
       [](const Args& a) -> Value { return logical_product(layout_arg(a, 0), layout_arg(a, 1)); }},
      {"size",
       {A::layout},
       1,
       R::integer,
       [](const Args& a) -> Value { return size(layout_arg(a, 0)); }},
      {"cosize",
       {A::layout},
       1,
       R::integer,
       [](const Args& a) -> Value { return cosize(layout_arg(a, 0)); }},
      {"crd2idx",
       {A::int_tuple, A::int_tuple, A::int_tuple},
       2,
       R::integer,
       [](const Args& a) -> Value {
         return crd2idx(tuple_arg(a, 0), tuple_arg(a, 1), optional_tuple_arg(a, 2));
       }},
      {"idx2crd",
       {A::int_tuple, A::int_tuple, A::int_tuple},
       2,
       R::int_tuple,
       [](const Args& a) -> Value {
         return idx2crd(tuple_arg(a, 0), tuple_arg(a, 1), optional_tuple_arg(a, 2));
       }},
  };
}

// The ops of a mesh's layout: its ranks, their groups, remapping and the checks of a layout.
std::vector<OpInfo> mesh_layout_ops() {
  return {
      {"mesh_coalesce",
       {A::layout},
       1,
       R::layout,
       [](const Args& a) -> Value { return mesh_coalesce(layout_arg(a, 0)); }},
      {"all_ranks",
       {A::layout},
       1,
       R::int_lists,
       [](const Args& a) -> Value {
         return nlohmann::json(all_ranks_from_zero(layout_arg(a, 0)));
       }},
      {"global_ranks",
       {A::layout, A::integer},
       2,
       R::int_lists,
       [](const Args& a) -> Value {
         return nlohmann::json(global_ranks(layout_arg(a, 0), int_arg(a, 1)));
       }},
      {"non_overlapping",
       {A::layout},
       1,
       R::boolean,
       [](const Args& a) -> Value { return check_non_overlap(layout_arg(a, 0)); }},
      {"remap",
       {A::layout, A::int_list},
       2,
       R::int_lists,
       [](const Args& a) -> Value {
         return rank_tensor_to_json(remap_to_tensor(layout_arg(a, 0), list_arg(a, 1)));
       }},
      {"unflatten",
       {A::layout, A::integer, A::int_list},
       3,
       R::layout,
       [](const Args& a) -> Value {
         return unflatten(layout_arg(a, 0), int_arg(a, 1), list_arg(a, 2));
       }},
      {"flat_canonical",
       {A::layout},
       1,
       R::layout,
       [](const Args& a) -> Value { return flat_canonical(layout_arg(a, 0)); }},
      {"orthogonal",
       {A::layout},
       1,
       R::boolean,
       [](const Args& a) -> Value { return check_orthogonal(layout_arg(a, 0)); }},
      {"sorted",
       {A::layout},
       1,
       R::boolean,
       [](const Args& a) -> Value { return check_sorted(layout_arg(a, 0)); }},
  };
}

}  // namespace

const std::vector<OpInfo>& ops() {
  static const std::vector<OpInfo> table = [] {
    std::vector<OpInfo> all = algebra_ops();
    for (OpInfo& op : mesh_layout_ops()) all.push_back(std::move(op));
    return all;
  }();
  return table;
}

std::string describe(const Value& v) {
  struct Visitor {
    std::string operator()(const Layout& l) const { return to_string(l); }
    std::string operator()(const IntTuple& t) const { return to_string(t); }
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const nlohmann::json& j) const { return j.dump(); }
  };
  return std::visit(Visitor{}, v);
}

// How deep the ranks of an op that lists them are nested: all_ranks a list, global_ranks a list
// per complement offset, remap the tensor [-1, *top_level_sizes].
std::size_t rank_list_depth(const OpInfo& op, const std::vector<Arg>& args) {
  if (op.name == "all_ranks") return 1;
  if (op.name == "global_ranks") return 2;
  return 1 + layout_arg(args, 0).rank();
}

// Whether every entry of `v` is an int exactly `depth` lists deep.
bool nested_to_depth(const nlohmann::json& v, std::size_t depth) {
  if (depth == 0) return v.is_number_integer();
  return v.is_array() && std::all_of(v.begin(), v.end(), [&](const nlohmann::json& item) {
           return nested_to_depth(item, depth - 1);
         });
}

}  // namespace meshgate::runner::layout_kind

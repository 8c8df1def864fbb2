// kind: layout — one operation of the layout algebra (docs/kinds.md, Layouts) on literal arguments,
// compared structurally with `expect`. The op table below is the whole kind: name, argument types,
// result type, and the library call.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "byte_size.hpp"
#include "case_kind.hpp"
#include "core/error.hpp"
#include "diagnostics.hpp"
#include "external_impl.hpp"
#include "kinds/case_values.hpp"
#include "kinds/memory_estimates.hpp"
#include "layout/layout.hpp"
#include "layout/mesh_layout.hpp"
#include "timing.hpp"

namespace meshgate::runner {
namespace {

enum class ArgType { layout, int_tuple, integer, int_list };
enum class ResultType { layout, int_tuple, integer, boolean, int_lists };

using Arg = std::variant<Layout, IntTuple, std::int64_t, std::vector<std::int64_t>>;
// Lists of ranks are kept as JSON: exact comparison and readable printing for free.
using Value = std::variant<Layout, IntTuple, std::int64_t, bool, nlohmann::json>;

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

struct OpInfo {
  std::string_view name;
  std::vector<ArgType> args;
  std::size_t required;  // the leading arguments that must be given; the rest are optional
  ResultType result;
  Value (*apply)(const std::vector<Arg>&);
};

const std::vector<OpInfo>& ops() {
  using A = ArgType;
  using R = ResultType;
  using Args = std::vector<Arg>;
  static const std::vector<OpInfo> table = {
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

Arg read_arg(ArgType type, const YAML::Node& value, const CaseNode& at) {
  switch (type) {
    case ArgType::layout:
      return read_layout(value, at, "args");
    case ArgType::int_tuple:
      return read_int_tuple(value, at, "args");
    case ArgType::integer:
      return read_int(value, at, "args");
    case ArgType::int_list:
      return read_int_list(value, at, "args");
  }
  throw std::logic_error("unhandled argument type");
}

Value read_expect(ResultType type, const YAML::Node& value, const CaseNode& at) {
  switch (type) {
    case ResultType::layout:
      return read_layout(value, at, "expect");
    case ResultType::int_tuple:
      return read_int_tuple(value, at, "expect");
    case ResultType::integer:
      return read_int(value, at, "expect");
    case ResultType::boolean: {
      bool b = false;
      if (!value.IsScalar() || !detail::decode_strict(value, b))
        at.fail_at(value, "expect", "expected true or false");
      return b;
    }
    case ResultType::int_lists:
      return read_nested_ints(value, at, "expect");
  }
  throw std::logic_error("unhandled result type");
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

std::string signature(const OpInfo& op) {
  static constexpr std::string_view names[] = {"layout", "int_tuple", "int", "int_list"};
  std::string out = "[";
  for (std::size_t i = 0; i < op.args.size(); ++i) {
    if (i) out += ", ";
    if (i >= op.required) out += "optional ";
    out += names[static_cast<int>(op.args[i])];
  }
  return out + "]";
}

// Bytes per enumerated rank of an op that lists ranks: the int64, its JSON value, and its text
// in the result row.
constexpr double kBytesPerListedRank = 8 + sizeof(nlohmann::json) + 16;

// size(L) x size(complement(L, world)): the ranks global_ranks and remap list. The complement
// is algebra on the layout's modes, cheap whatever the sizes; where the library rejects it the
// op will too, and only L's own ranks count.
double ranks_with_complement(const Layout& l, std::int64_t world) {
  try {
    return size_estimate(l.shape()) * size_estimate(complement(l, world).shape());
  } catch (const meshgate::Error&) {
    return size_estimate(l.shape());
  }
}

class LayoutCase final : public PreparedCase {
 public:
  LayoutCase(const OpInfo& op, YAML::Node args_node, std::vector<Arg> args,
             std::optional<Value> expected)
      : op_(op),
        args_node_(std::move(args_node)),
        args_(std::move(args)),
        expected_(std::move(expected)) {}

  // The ops that enumerate the ranks of a layout; the algebra works on modes, never on ranks.
  MemoryEstimate memory_estimate() const override {
    double ranks = 0;
    double bytes_per_rank = kBytesPerListedRank;
    if (op_.name == "all_ranks") {
      ranks = size_estimate(layout_arg(args_, 0).shape());
    } else if (op_.name == "non_overlapping") {
      ranks = size_estimate(layout_arg(args_, 0).shape());
      bytes_per_rank = 8;  // sorted in place, never listed
    } else if (op_.name == "global_ranks") {
      ranks = ranks_with_complement(layout_arg(args_, 0), int_arg(args_, 1));
    } else if (op_.name == "remap") {
      const auto map_size = static_cast<std::int64_t>(list_arg(args_, 1).size());
      ranks = ranks_with_complement(layout_arg(args_, 0), std::max<std::int64_t>(map_size, 1));
    } else {
      return {};
    }
    char count[32];
    std::snprintf(count, sizeof count, "%.4g", ranks);
    return {
        ranks * bytes_per_rank, "args",
        std::string(op_.name) + " lists " + count + " ranks x " + format_byte_size(bytes_per_rank)};
  }

  nlohmann::json params() const override {
    nlohmann::json p = {{"op", op_.name}, {"args", yaml_to_json(args_node_)}};
    if (expected_) p["expect"] = describe(*expected_);
    return p;
  }

  Outcome run(RunContext&) override { return judge(apply()); }

  // The op's arguments as parsed (layouts and tuples in canonical CuTe text), so that an
  // implementation reads exactly what meshgate computed from.
  std::optional<nlohmann::json> impl_request(const std::filesystem::path&, std::string&) override {
    nlohmann::json args = nlohmann::json::array();
    for (const Arg& arg : args_) {
      if (const auto* l = std::get_if<Layout>(&arg)) {
        args.push_back(to_string(*l));
      } else if (const auto* t = std::get_if<IntTuple>(&arg)) {
        args.push_back(t->is_int() ? nlohmann::json(t->value()) : nlohmann::json(to_string(*t)));
      } else if (const auto* i = std::get_if<std::int64_t>(&arg)) {
        args.push_back(*i);
      } else {
        args.push_back(std::get<std::vector<std::int64_t>>(arg));
      }
    }
    return nlohmann::json{{"op", op_.name}, {"args", std::move(args)}};
  }

  Outcome check_observables(const nlohmann::json& observables,
                            const std::filesystem::path&) override {
    return judge(read_observed(observables));
  }

  // Single ops take nanoseconds: the runner sizes the batch (timing.hpp).
  double time_calls(RunContext&, std::int64_t calls) override {
    const double start = monotonic_seconds();
    for (std::int64_t i = 0; i < calls; ++i) keep_result(apply());
    return monotonic_seconds() - start;
  }

 private:
  Value apply() const { return op_.apply(args_); }

  // The one comparison of a result with `expect`, whoever computed it.
  Outcome judge(const Value& actual) const {
    Outcome outcome;
    if (expected_ && actual != *expected_) {
      outcome.status = Status::fail;
      outcome.message = std::string(op_.name) + ": expected " + describe(*expected_) + ", got " +
                        describe(actual);
    }
    outcome.metrics["result"] = describe(actual);
    return outcome;
  }

  // `observables.result` read as the op's result type; ImplFailure when it is not one.
  Value read_observed(const nlohmann::json& observables) const {
    const std::string op(op_.name);
    if (!observables.is_object() || !observables.contains("result")) {
      throw ImplFailure("answered no 'result' for the " + op +
                        " op (observables: " + observables.dump().substr(0, 200) + ")");
    }
    const nlohmann::json& r = observables["result"];
    const auto wrong = [&](const std::string& wanted, const std::string& why = "") {
      return ImplFailure("answered result " + r.dump().substr(0, 200) + " for the " + op +
                         " op, which gives " + wanted + (why.empty() ? "" : ": " + why));
    };
    switch (op_.result) {
      case ResultType::layout:
        if (!r.is_string()) throw wrong("a layout in CuTe notation (a string)");
        try {
          return parse_layout(r.get<std::string>());
        } catch (const meshgate::Error& e) {
          throw wrong("a layout in CuTe notation", e.what());
        }
      case ResultType::int_tuple:
        if (r.is_number_integer()) return IntTuple(r.get<std::int64_t>());
        if (!r.is_string()) throw wrong("an int tuple (an integer or a string in CuTe notation)");
        try {
          return parse_int_tuple(r.get<std::string>());
        } catch (const meshgate::Error& e) {
          throw wrong("an int tuple in CuTe notation", e.what());
        }
      case ResultType::integer:
        if (!r.is_number_integer()) throw wrong("an integer");
        return r.get<std::int64_t>();
      case ResultType::boolean:
        if (!r.is_boolean()) throw wrong("a boolean");
        return r.get<bool>();
      case ResultType::int_lists: {
        const std::size_t depth = rank_list_depth(op_, args_);
        if (!nested_to_depth(r, depth)) {
          throw wrong("ranks nested " + std::to_string(depth) + (depth == 1 ? " list" : " lists") +
                      " deep");
        }
        return r;
      }
    }
    throw std::logic_error("unhandled result type");
  }

  const OpInfo& op_;
  YAML::Node args_node_;
  std::vector<Arg> args_;
  std::optional<Value> expected_;
};

}  // namespace

const std::vector<std::string>& layout_case_keys() {
  static const std::vector<std::string> keys = {"op", "args", "expect"};
  return keys;
}

std::unique_ptr<PreparedCase> parse_layout_case(CaseNode& node, bool expect_error) {
  const std::string name = node.required<std::string>("op");
  const OpInfo* op = nullptr;
  std::string known;
  for (const OpInfo& candidate : ops()) {
    if (candidate.name == name) op = &candidate;
    known += (known.empty() ? "" : ", ") + std::string(candidate.name);
  }
  if (!op) node.fail("op", "unknown layout op '" + name + "'; known ops: " + known);

  YAML::Node args_node = node.raw("args");
  if (!args_node || args_node.IsNull()) {
    node.fail("args", "is required: a list " + signature(*op) + " for " + name);
  }
  if (!args_node.IsSequence()) {
    node.fail_at(
        args_node, "args",
        "expected a list " + signature(*op) + " for " + name + ", got " + describe_node(args_node));
  }
  if (args_node.size() < op->required || args_node.size() > op->args.size()) {
    node.fail_at(args_node, "args",
                 name + " takes " + signature(*op) + ", got " + std::to_string(args_node.size()) +
                     " argument(s)");
  }

  std::vector<Arg> args;
  for (std::size_t i = 0; i < args_node.size(); ++i) {
    try {
      args.push_back(read_arg(op->args[i], args_node[i], node));
    } catch (const meshgate::Error& e) {
      reject_value_at(node, args_node[i], "args", e.what());
    }
  }

  std::optional<Value> expected;
  if (YAML::Node expect = node.raw("expect"); expect && !expect.IsNull()) {
    try {
      expected = read_expect(op->result, expect, node);
    } catch (const meshgate::Error& e) {
      node.fail_at(expect, "expect", e.what());
    }
    if (op->result == ResultType::int_lists) {
      const std::size_t depth = rank_list_depth(*op, args);
      if (!nested_to_depth(std::get<nlohmann::json>(*expected), depth)) {
        node.fail_at(expect, "expect",
                     "expected ranks nested " + std::to_string(depth) +
                         (depth == 1 ? " list" : " lists") + " deep, as " + name + " gives them");
      }
    }
  } else if (!expect_error) {
    node.fail("expect", "is required (or expect_error) for a layout case");
  }
  return std::make_unique<LayoutCase>(*op, args_node, std::move(args), std::move(expected));
}

}  // namespace meshgate::runner

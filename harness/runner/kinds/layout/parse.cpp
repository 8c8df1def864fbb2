// Reading a layout case: the op, its arguments and `expect`; its memory estimate.

#include "kinds/layout/layout_case.hpp"

namespace meshgate::runner {
namespace layout_kind {
namespace {

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

}  // namespace

MemoryEstimate LayoutCase::memory_estimate() const {
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

}  // namespace layout_kind

using namespace layout_kind;

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

#pragma once
// kind: layout — one operation of the layout algebra (docs/kinds.md, Layouts) on literal arguments,
// compared structurally with `expect`. The op table (ops.cpp) is the whole kind: name, argument
// types, result type, and the library call.
//
// The kind's files: ops.cpp holds the op table, parse.cpp reads the case, run.cpp applies the op
// on meshgate's library, impl.cpp hands it to another implementation and reads its answer,
// judge.cpp compares a result with `expect`, whoever computed it.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
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

std::unique_ptr<PreparedCase> parse_layout_case(CaseNode& node, bool expect_error);
const std::vector<std::string>& layout_case_keys();

namespace layout_kind {

enum class ArgType { layout, int_tuple, integer, int_list };
enum class ResultType { layout, int_tuple, integer, boolean, int_lists };

using Arg = std::variant<Layout, IntTuple, std::int64_t, std::vector<std::int64_t>>;
// Lists of ranks are kept as JSON: exact comparison and readable printing for free.
using Value = std::variant<Layout, IntTuple, std::int64_t, bool, nlohmann::json>;

const Layout& layout_arg(const std::vector<Arg>& a, std::size_t i);
const IntTuple& tuple_arg(const std::vector<Arg>& a, std::size_t i);
std::int64_t int_arg(const std::vector<Arg>& a, std::size_t i);
const std::vector<std::int64_t>& list_arg(const std::vector<Arg>& a, std::size_t i);
std::optional<IntTuple> optional_tuple_arg(const std::vector<Arg>& a, std::size_t i);

struct OpInfo {
  std::string_view name;
  std::vector<ArgType> args;
  std::size_t required;  // the leading arguments that must be given; the rest are optional
  ResultType result;
  Value (*apply)(const std::vector<Arg>&);
};

// Every op of the kind, in the order messages list them (ops.cpp).
const std::vector<OpInfo>& ops();

// A result as text, for messages and params.
std::string describe(const Value& v);

// How deep the ranks of an op that lists them are nested (ops.cpp).
std::size_t rank_list_depth(const OpInfo& op, const std::vector<Arg>& args);
// Whether every entry of `v` is an int exactly `depth` lists deep.
bool nested_to_depth(const nlohmann::json& v, std::size_t depth);

// Bytes per enumerated rank of an op that lists ranks: the int64, its JSON value, and its text
// in the result row.
inline constexpr double kBytesPerListedRank = 8 + sizeof(nlohmann::json) + 16;

class LayoutCase final : public PreparedCase {
 public:
  LayoutCase(const OpInfo& op, YAML::Node args_node, std::vector<Arg> args,
             std::optional<Value> expected)
      : op_(op),
        args_node_(std::move(args_node)),
        args_(std::move(args)),
        expected_(std::move(expected)) {}

  // The ops that enumerate the ranks of a layout; the algebra works on modes, never on ranks.
  MemoryEstimate memory_estimate() const override;

  nlohmann::json params() const override;

  Outcome run(RunContext&) override { return judge(apply()); }

  // The op's arguments as parsed (layouts and tuples in canonical CuTe text), so that an
  // implementation reads exactly what meshgate computed from.
  std::optional<nlohmann::json> impl_request(const std::filesystem::path&, std::string&) override;

  Outcome check_observables(const nlohmann::json& observables,
                            const std::filesystem::path&) override;

  // Single ops take nanoseconds: the runner sizes the batch (timing.hpp).
  double time_calls(RunContext&, std::int64_t calls) override;

 private:
  Value apply() const { return op_.apply(args_); }

  // The one comparison of a result with `expect`, whoever computed it.
  Outcome judge(const Value& actual) const;

  // `observables.result` read as the op's result type; ImplFailure when it is not one.
  Value read_observed(const nlohmann::json& observables) const;

  const OpInfo& op_;
  YAML::Node args_node_;
  std::vector<Arg> args_;
  std::optional<Value> expected_;
};

}  // namespace layout_kind
}  // namespace meshgate::runner

#pragma once
// The comm-string contract: a step of a plan written out as text, e.g. "all_reduce(A+C, sum)",
// "reduce_scatter(B, avg, dim=0)", "all_gather(B+C, dim=1)", "all_to_all(B, dim=0->1)", and the
// local steps "chunk(B, dim=0)" and "partial(B, sum)". The executor's record of what it issued,
// a case's expect.comms and steps:, `meshgate plan` and other implementations' answers all use
// this form; this file is its only formatter and its only parser.
//
// Grammar: kind "(" group ("," " " argument)* ")", where group is mesh dims joined by '+' (by
// name, by index on an unnamed mesh; a group of several dims is their flattened group,
// ascending) and the arguments follow the kind: all_reduce and partial: op; reduce_scatter:
// op, "dim=" N; all_gather and chunk: "dim=" N; all_to_all: "dim=" A "->" B. Op is a reduce
// op (sum, avg, product, min, max); N, A, B are tensor dims >= 0.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/device_mesh.hpp"
#include "placement/placement.hpp"
#include "plan/transform_step.hpp"

namespace meshgate {

// One step as its comm string says it, before its dims are looked up on a mesh.
struct CommString {
  StepKind kind = StepKind::all_reduce;
  std::vector<std::string> group;      // the dims as written, in order: "B+C" -> {"B", "C"}
  ReduceOp reduce_op = ReduceOp::sum;  // all_reduce, reduce_scatter, partial
  std::int64_t src_tensor_dim = -1;    // all_gather, all_to_all
  std::int64_t dst_tensor_dim = -1;    // reduce_scatter, all_to_all, chunk
  friend bool operator==(const CommString&, const CommString&) = default;
};

// The comm string of a step of `kind` on `group` (dims already joined by '+'); the arguments
// that `kind` does not take are ignored.
std::string format_comm_string(StepKind kind, std::string_view group, ReduceOp reduce_op,
                               std::int64_t src_tensor_dim, std::int64_t dst_tensor_dim);
std::string to_string(const CommString& comm);

// The step that `text` writes. Blanks around the group and each argument are ignored, the
// rest must follow the grammar; Error(value) "step '<text>': <why>" otherwise. The group's
// names are not checked: whether they name dims is a question for a mesh (steps_from_text
// asks it). A string parses back from to_string as the CommString it was made from, but not
// every string that parses is written as the formatter writes it (blanks, dims out of order):
// compare with the formatter's text where that matters (expect.comms does).
CommString parse_comm_string(std::string_view text);

// How comm strings name mesh dim `dim` of `mesh`: its name, or its index on an unnamed mesh.
std::string comm_dim_name(const DeviceMesh& mesh, std::int64_t dim);
// The group of `dims`, in the order given: "A+C".
std::string comm_group_name(const DeviceMesh& mesh, std::span<const std::int64_t> dims);

// The comm string of `step` on `mesh`. A merged step's division by avg_scale is a local step
// and not part of the string.
std::string to_string(const TransformStep& step, const DeviceMesh& mesh);
// The comm strings of the collective steps with group size > 1, in issue order: what the
// executor issues and `expect.comms` lists (local steps are not part of comm lists).
std::vector<std::string> comm_strings(std::span<const TransformStep> steps,
                                      const DeviceMesh& mesh);
// Error(value) naming the dim when a mesh dim name cannot stand in a comm string: an empty
// name, one with '+', ',', '(' or ')' (which would read as another group or another argument:
// a dim "A+B" prints like the merged group of A and B) or with blanks at either end.
void check_comm_string_names(std::span<const std::string> names);

}  // namespace meshgate

#include "plan/comm_string.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

#include "core/error.hpp"

namespace meshgate {
namespace {

constexpr std::array kStepKinds = {StepKind::all_reduce,  StepKind::reduce_scatter,
                                   StepKind::all_gather,  StepKind::all_to_all,
                                   StepKind::local_chunk, StepKind::local_partial};

std::string trimmed(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return std::string(text);
}

}  // namespace

// The kind words of comm strings.
std::string_view to_string(StepKind kind) {
  switch (kind) {
    case StepKind::all_reduce:
      return "all_reduce";
    case StepKind::reduce_scatter:
      return "reduce_scatter";
    case StepKind::all_gather:
      return "all_gather";
    case StepKind::all_to_all:
      return "all_to_all";
    case StepKind::local_chunk:
      return "chunk";
    case StepKind::local_partial:
      return "partial";
  }
  return "?";
}

std::string format_comm_string(StepKind kind, std::string_view group, ReduceOp reduce_op,
                               std::int64_t src_tensor_dim, std::int64_t dst_tensor_dim) {
  std::string out(to_string(kind));
  out += "(";
  out += group;
  switch (kind) {
    case StepKind::all_reduce:
    case StepKind::local_partial:
      out += ", " + std::string(to_string(reduce_op));
      break;
    case StepKind::reduce_scatter:
      out += ", " + std::string(to_string(reduce_op)) + ", dim=" + std::to_string(dst_tensor_dim);
      break;
    case StepKind::all_gather:
      out += ", dim=" + std::to_string(src_tensor_dim);
      break;
    case StepKind::all_to_all:
      out += ", dim=" + std::to_string(src_tensor_dim) + "->" + std::to_string(dst_tensor_dim);
      break;
    case StepKind::local_chunk:
      out += ", dim=" + std::to_string(dst_tensor_dim);
      break;
  }
  return out + ")";
}

std::string to_string(const CommString& comm) {
  std::string group;
  for (std::size_t i = 0; i < comm.group.size(); ++i) {
    if (i) group += "+";
    group += comm.group[i];
  }
  return format_comm_string(comm.kind, group, comm.reduce_op, comm.src_tensor_dim,
                            comm.dst_tensor_dim);
}

CommString parse_comm_string(std::string_view text) {
  const auto fail = [&](const std::string& why) -> Error {
    return Error(ErrorKind::value, "step '" + std::string(text) + "': " + why);
  };
  const std::size_t open = text.find('(');
  if (open == std::string_view::npos || text.empty() || text.back() != ')') {
    throw fail("write it as kind(dims, ...), e.g. reduce_scatter(B+C, sum, dim=0)");
  }
  const std::string_view name = text.substr(0, open);
  // Everything between the parentheses, split at commas.
  std::vector<std::string> args;
  std::size_t start = open + 1;
  for (std::size_t i = start; i < text.size(); ++i) {
    if (text[i] == ',' || i + 1 == text.size()) {
      args.push_back(trimmed(text.substr(start, i - start)));
      start = i + 1;
    }
  }
  const auto dim_arg = [&](const std::string& arg) -> std::int64_t {
    std::int64_t v = -1;
    if (arg.rfind("dim=", 0) == 0) {
      const char* b = arg.data() + 4;
      const auto [end, ec] = std::from_chars(b, arg.data() + arg.size(), v);
      if (ec == std::errc() && end == arg.data() + arg.size() && v >= 0) return v;
    }
    throw fail("expected dim=N, got '" + arg + "'");
  };
  const auto op_arg = [&](const std::string& arg) -> ReduceOp {
    try {
      return parse_reduce_op(arg);
    } catch (const Error& e) {
      throw fail(e.what());
    }
  };
  const auto arity = [&](std::size_t n) {
    if (args.size() != n) {
      throw fail("takes " + std::to_string(n) + " arguments, got " + std::to_string(args.size()));
    }
  };
  CommString c;
  const auto* kind = std::find_if(kStepKinds.begin(), kStepKinds.end(),
                                  [&](StepKind k) { return to_string(k) == name; });
  if (kind == kStepKinds.end()) {
    throw fail("unknown kind '" + std::string(name) +
               "': use all_reduce, reduce_scatter, all_gather, all_to_all, chunk or partial");
  }
  c.kind = *kind;
  switch (c.kind) {
    case StepKind::all_reduce:
    case StepKind::local_partial:
      arity(2);
      c.reduce_op = op_arg(args[1]);
      break;
    case StepKind::reduce_scatter:
      arity(3);
      c.reduce_op = op_arg(args[1]);
      c.dst_tensor_dim = dim_arg(args[2]);
      break;
    case StepKind::all_gather:
      arity(2);
      c.src_tensor_dim = dim_arg(args[1]);
      break;
    case StepKind::local_chunk:
      arity(2);
      c.dst_tensor_dim = dim_arg(args[1]);
      break;
    case StepKind::all_to_all: {
      arity(2);
      const std::size_t arrow = args[1].find("->");
      if (arrow == std::string::npos) throw fail("expected dim=A->B, got '" + args[1] + "'");
      c.src_tensor_dim = dim_arg(args[1].substr(0, arrow));
      c.dst_tensor_dim = dim_arg("dim=" + args[1].substr(arrow + 2));
      break;
    }
  }
  const std::string& dims = args[0];
  std::size_t from = 0;
  for (std::size_t i = 0; i <= dims.size(); ++i) {
    if (i < dims.size() && dims[i] != '+') continue;
    c.group.push_back(dims.substr(from, i - from));
    from = i + 1;
  }
  return c;
}

std::string comm_dim_name(const DeviceMesh& mesh, std::int64_t dim) {
  const std::vector<std::string>& names = mesh.names();
  const auto d = static_cast<std::size_t>(dim);
  return d < names.size() ? names[d] : std::to_string(dim);
}

std::string comm_group_name(const DeviceMesh& mesh, std::span<const std::int64_t> dims) {
  std::string out;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) out += "+";
    out += comm_dim_name(mesh, dims[i]);
  }
  return out;
}

std::string to_string(const TransformStep& s, const DeviceMesh& mesh) {
  return format_comm_string(s.kind, comm_group_name(mesh, s.mesh_dims), s.reduce_op,
                            s.src_tensor_dim, s.dst_tensor_dim);
}

std::vector<std::string> comm_strings(std::span<const TransformStep> steps,
                                      const DeviceMesh& mesh) {
  std::vector<std::string> out;
  for (const TransformStep& s : steps) {
    if (is_collective(s.kind) && s.group_size > 1) out.push_back(to_string(s, mesh));
  }
  return out;
}

void check_comm_string_names(std::span<const std::string> names) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    const bool blank_end =
        !name.empty() && (std::isspace(static_cast<unsigned char>(name.front())) ||
                          std::isspace(static_cast<unsigned char>(name.back())));
    if (!name.empty() && name.find_first_of("+,()") == std::string::npos && !blank_end) continue;
    throw Error(
        ErrorKind::value,
        "mesh dim " + std::to_string(i) + " is named '" + name +
            "', which a comm string such as all_reduce(A+B, sum) cannot name unambiguously: "
            "give every dim a non-empty name without '+', ',', '(', ')' or blanks at its ends");
  }
}

}  // namespace meshgate

#pragma once
// The reduction of a collective and of a Partial placement: one enum for both, so a plan step
// hands its op to a Communicator unchanged.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace meshgate {

enum class ReduceOp : std::uint8_t { sum, avg, max, min, product };

inline constexpr ReduceOp kReduceOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max,
                                          ReduceOp::min, ReduceOp::product};

constexpr std::string_view to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
    case ReduceOp::product:
      return "product";
  }
  return "unknown-reduce-op";
}

// "sum", "avg", "max", "min", "product" (surrounding spaces allowed); Error(value) otherwise.
inline ReduceOp parse_reduce_op(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
  for (ReduceOp op : kReduceOps) {
    if (t == to_string(op)) return op;
  }
  throw Error(ErrorKind::value, "unknown reduce op '" + std::string(text) +
                                    "': use one of sum, avg, max, min, product");
}

}  // namespace meshgate

#include "comm/communicator.hpp"

#include <array>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace meshgate::comm {
namespace {

constexpr std::array<DType, 8> kDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                          DType::i32, DType::i64, DType::i8,  DType::u8};

}  // namespace

std::size_t element_size(DType d) {
  switch (d) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::i8:
      return 1;
    case DType::u8:
      return 1;
  }
  throw Error(ErrorKind::value,
              "element_size: unknown dtype value " + std::to_string(static_cast<int>(d)));
}

std::string_view to_string(DType d) {
  switch (d) {
    case DType::f32:
      return "float32";
    case DType::f64:
      return "float64";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::i8:
      return "int8";
    case DType::u8:
      return "uint8";
  }
  return "unknown-dtype";
}

DType parse_dtype(std::string_view text) {
  std::string known;
  for (DType d : kDTypes) {
    if (to_string(d) == text) return d;
    known += (known.empty() ? "" : ", ") + std::string(to_string(d));
  }
  throw Error(ErrorKind::value,
              "unknown dtype '" + std::string(text) + "': expected one of " + known);
}

GroupPosition locate_rank(const std::vector<std::vector<int>>& groups, int size, int rank) {
  std::vector<bool> seen(static_cast<std::size_t>(size), false);
  GroupPosition found;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty()) {
      throw Error(ErrorKind::value, "split: group " + std::to_string(g) + " is empty");
    }
    for (std::size_t p = 0; p < groups[g].size(); ++p) {
      const int r = groups[g][p];
      if (r < 0 || r >= size) {
        throw Error(ErrorKind::value, "split: rank " + std::to_string(r) + " in group " +
                                          std::to_string(g) + " is outside [0, " +
                                          std::to_string(size) + ")");
      }
      if (seen[static_cast<std::size_t>(r)]) {
        throw Error(ErrorKind::value, "split: rank " + std::to_string(r) +
                                          " appears twice (again in group " + std::to_string(g) +
                                          "); groups must be disjoint");
      }
      seen[static_cast<std::size_t>(r)] = true;
      if (r == rank) found = {static_cast<int>(g), static_cast<int>(p)};
    }
  }
  return found;
}

bool is_floating(DType d) {
  return d == DType::f32 || d == DType::f64 || d == DType::f16 || d == DType::bf16;
}

BackendError unsupported(std::string_view backend, std::string_view collective, DType dtype,
                         std::string_view reason) {
  return BackendError(ErrorKind::runtime, "backend '" + std::string(backend) +
                                              "' does not support " + std::string(collective) +
                                              " for " + std::string(to_string(dtype)) + ": " +
                                              std::string(reason));
}

BackendError unsupported(std::string_view backend, std::string_view collective, ReduceOp op,
                         DType dtype, std::string_view reason) {
  return unsupported(backend, std::string(collective) + "(" + std::string(to_string(op)) + ")",
                     dtype, reason);
}

void Communicator::lacks(std::string_view collective) const {
  throw BackendError(ErrorKind::runtime, "backend '" + std::string(backend()) +
                                             "' does not support " + std::string(collective));
}

void Communicator::all_reduce(const void*, void*, std::size_t, DType, ReduceOp) {
  lacks("all_reduce");
}

void Communicator::all_gather(const void*, void*, std::size_t, DType) { lacks("all_gather"); }

void Communicator::reduce_scatter(const void*, void*, std::size_t, DType, ReduceOp) {
  lacks("reduce_scatter");
}

void Communicator::all_to_all(const void*, void*, std::size_t, DType) { lacks("all_to_all"); }

void Communicator::broadcast(const void*, void*, std::size_t, DType, int) { lacks("broadcast"); }

void Communicator::barrier() { lacks("barrier"); }

std::unique_ptr<Communicator> Communicator::split(const std::vector<std::vector<int>>&) {
  lacks("split");
}

}  // namespace meshgate::comm

#pragma once
// Small helpers shared by the executor's source files (host_tensor.cpp, redistribute.cpp); not
// part of the library's interface.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace meshgate::redistribute_detail {

// memcpy for buffers that may be empty (empty shards): memcpy's pointers must be valid even for
// zero bytes, and an empty vector's data() may be null.
inline void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

inline std::int64_t product(std::span<const std::int64_t> s) {
  std::int64_t p = 1;
  for (std::int64_t v : s) p *= v;
  return p;
}

inline std::string shape_string(std::span<const std::int64_t> s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

}  // namespace meshgate::redistribute_detail

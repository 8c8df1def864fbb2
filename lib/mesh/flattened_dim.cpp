#include "mesh/flattened_dim.hpp"

#include <vector>

#include "core/error.hpp"
#include "layout/int_tuple.hpp"

namespace meshgate {

std::size_t flattened_leaves(std::span<const LayoutLeaf> leaves, std::span<LayoutLeaf> out) {
  if (out.size() < std::max<std::size_t>(leaves.size(), 1)) {
    throw Error(ErrorKind::value, "flattened_leaves: room for " + std::to_string(out.size()) +
                                      " leaves, " + std::to_string(leaves.size()) + " given");
  }
  // Left to right, as mesh_coalesce's right-to-left walk merges the same adjacent pairs: the
  // merge of two neighbours depends only on the outer one's stride and the inner one's extent.
  std::size_t n = 0;
  for (const LayoutLeaf& leaf : leaves) {
    if (leaf.size == 1) continue;
    if (n > 0 && out[n - 1].stride == leaf.size * leaf.stride) {
      out[n - 1] = {out[n - 1].size * leaf.size, leaf.stride};
    } else {
      out[n++] = leaf;
    }
  }
  if (n == 0) out[n++] = {1, 0};
  for (std::size_t i = 0; i < n; ++i) {
    if (out[i].stride == 0) out[i].stride = 1;
  }
  return n;
}

Layout flattened_layout(std::span<const LayoutLeaf> flattened) {
  if (flattened.size() == 1) {
    return Layout(IntTuple(flattened[0].size), IntTuple(flattened[0].stride));
  }
  std::vector<IntTuple> sizes;
  std::vector<IntTuple> strides;
  sizes.reserve(flattened.size());
  strides.reserve(flattened.size());
  for (const LayoutLeaf& leaf : flattened) {
    sizes.emplace_back(leaf.size);
    strides.emplace_back(leaf.stride);
  }
  return Layout(IntTuple::tuple({IntTuple::tuple(std::move(sizes))}),
                IntTuple::tuple({IntTuple::tuple(std::move(strides))}));
}

bool is_flattened_layout(const Layout& layout, std::span<const LayoutLeaf> flattened) {
  if (layout.shape().is_int()) {
    return flattened.size() == 1 && flattened[0].size == layout.shape().value() &&
           flattened[0].stride == layout.stride().value();
  }
  // Several leaves: one mode holding a flat tuple of them.
  if (flattened.size() < 2 || layout.rank() != 1) return false;
  const IntTuple sizes = layout.shape()[0];
  const IntTuple strides = layout.stride()[0];
  if (sizes.is_int() || sizes.length() != flattened.size()) return false;
  for (std::size_t i = 0; i < flattened.size(); ++i) {
    const IntTuple size = sizes[i];
    const IntTuple stride = strides[i];
    if (!size.is_int() || size.value() != flattened[i].size ||
        stride.value() != flattened[i].stride) {
      return false;
    }
  }
  return true;
}

Layout flattened_layout(const Layout& dims) {
  const std::vector<std::int64_t> sizes = leaves(dims.shape());
  const std::vector<std::int64_t> strides = leaves(dims.stride());
  std::vector<LayoutLeaf> in;
  in.reserve(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) in.push_back({sizes[i], strides[i]});
  std::vector<LayoutLeaf> out(std::max<std::size_t>(in.size(), 1));
  out.resize(flattened_leaves(in, out));
  return flattened_layout(out);
}

MeshAxes flattened_axes(const MeshAxes& dims) {
  return MeshAxes{{collapse(dims)}};
}

}  // namespace meshgate

// The plan cache of cached_plan_redistribute, as _gen_transform_infos's functools.cache:
// equal inputs give the same Plan object.
#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>

#include "plan/plan.hpp"

namespace meshgate {
namespace {

// Everything a plan depends on, compared structurally (no printing on the lookup path).
struct CacheKey {
  LayoutModel model;
  Layout layout;
  std::vector<std::string> names;
  std::vector<std::pair<std::string, Layout>> flattened;
  std::vector<Placement> src;
  std::vector<Placement> dst;
  Shape shape;
  std::int64_t element_size;
  std::vector<std::int64_t> coordinate;
  PlanOptions options;
  bool optimization_enabled;
};

// The same inputs as the caller holds them: a lookup copies nothing (a hit costs less than
// planning). The coordinate is the caller's, or empty for all zeros.
struct Lookup {
  const DTensorSpec& src;
  const DTensorSpec& dst;
  std::span<const std::int64_t> coordinate;
  const PlanOptions& options;
  bool optimization_enabled;
};

// One hash for both forms. The flattened registry is left out (it only tells apart meshes that
// are equal otherwise) and compared by CacheEqual.
std::size_t hash_parts(LayoutModel model, const Layout& layout,
                       std::span<const std::string> names, std::span<const Placement> src,
                       std::span<const Placement> dst, std::span<const std::int64_t> shape,
                       std::span<const std::int64_t> coordinate, std::int64_t element_size,
                       const PlanOptions& options, bool optimization_enabled) {
  std::size_t h = std::hash<Layout>{}(layout) ^ static_cast<std::size_t>(model);
  auto mix = [&h](std::size_t v) { h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2); };
  for (const std::string& n : names) mix(std::hash<std::string>{}(n));
  for (const Placement& p : src) mix(std::hash<Placement>{}(p));
  for (const Placement& p : dst) mix(std::hash<Placement>{}(p) * 3);
  for (std::int64_t s : shape) mix(static_cast<std::size_t>(s));
  // All zeros hash as an empty coordinate, so that both spellings of it meet.
  for (std::int64_t c : coordinate) mix(static_cast<std::size_t>(c) * 7 + 1);
  mix(static_cast<std::size_t>(element_size));
  mix(static_cast<std::size_t>(options.optimize) | static_cast<std::size_t>(options.planner) << 1 |
      static_cast<std::size_t>(options.api) << 3 |
      static_cast<std::size_t>(optimization_enabled) << 5);
  return h;
}

bool all_zero(std::span<const std::int64_t> coordinate) {
  for (std::int64_t c : coordinate) {
    if (c != 0) return false;
  }
  return true;
}

// The coordinate as hashed: empty when all zeros.
std::span<const std::int64_t> hashed_coordinate(std::span<const std::int64_t> coordinate) {
  return all_zero(coordinate) ? std::span<const std::int64_t>{} : coordinate;
}

struct CacheHash {
  using is_transparent = void;
  std::size_t operator()(const CacheKey& k) const noexcept {
    return hash_parts(k.model, k.layout, k.names, k.src, k.dst, k.shape,
                      hashed_coordinate(k.coordinate), k.element_size, k.options,
                      k.optimization_enabled);
  }
  std::size_t operator()(const Lookup& l) const noexcept {
    return hash_parts(l.src.mesh.model(), l.src.mesh.layout(), l.src.mesh.names(),
                      l.src.placements, l.dst.placements, l.src.shape,
                      hashed_coordinate(l.coordinate), l.src.element_size, l.options,
                      l.optimization_enabled);
  }
};

struct CacheEqual {
  using is_transparent = void;
  bool operator()(const CacheKey& a, const CacheKey& b) const {
    return a.model == b.model && a.layout == b.layout && a.names == b.names &&
           a.flattened == b.flattened && a.src == b.src && a.dst == b.dst && a.shape == b.shape &&
           a.element_size == b.element_size && a.coordinate == b.coordinate &&
           a.options == b.options && a.optimization_enabled == b.optimization_enabled;
  }
  bool operator()(const Lookup& l, const CacheKey& k) const {
    const DeviceMesh& mesh = l.src.mesh;
    const bool same_coordinate =
        l.coordinate.empty() ? all_zero(k.coordinate)
                             : std::ranges::equal(l.coordinate, k.coordinate);
    return mesh.model() == k.model && same_coordinate && l.src.placements == k.src &&
           l.dst.placements == k.dst && l.src.shape == k.shape &&
           l.src.element_size == k.element_size && l.options == k.options &&
           l.optimization_enabled == k.optimization_enabled && mesh.layout() == k.layout &&
           mesh.names() == k.names && mesh.flattened_equals(k.flattened);
  }
  bool operator()(const CacheKey& k, const Lookup& l) const { return (*this)(l, k); }
};

}  // namespace

std::shared_ptr<const Plan> cached_plan_redistribute(const DTensorSpec& src, const DTensorSpec& dst,
                                                     std::span<const std::int64_t> coordinate,
                                                     const PlanOptions& options) {
  static std::mutex mutex;
  static std::unordered_map<CacheKey, std::shared_ptr<const Plan>, CacheHash, CacheEqual> cache;
  // Plans for a different mesh or tensor are refused by plan_redistribute below; the key only
  // has to separate what can plan.
  if (!(dst.mesh.layout() == src.mesh.layout() && dst.mesh.names() == src.mesh.names() &&
        dst.shape == src.shape && dst.element_size == src.element_size)) {
    return std::make_shared<const Plan>(plan_redistribute(src, dst, coordinate, options));
  }
  const Lookup lookup{src, dst, coordinate, options, transform_optimization_enabled()};
  {
    std::lock_guard lock(mutex);
    if (auto it = cache.find(lookup); it != cache.end()) return it->second;
  }
  CacheKey key{src.mesh.model(),
               src.mesh.layout(),
               src.mesh.names(),
               src.mesh.flattened(),
               src.placements,
               dst.placements,
               src.shape,
               src.element_size,
               {coordinate.begin(), coordinate.end()},
               options,
               lookup.optimization_enabled};
  if (key.coordinate.empty()) key.coordinate.assign(src.mesh.ndim(), 0);
  auto plan = std::make_shared<const Plan>(plan_redistribute(src, dst, key.coordinate, options));
  std::lock_guard lock(mutex);
  // Bounded like an lru_cache: a sweep over many shapes must not grow memory without end.
  if (cache.size() >= 4096) cache.clear();
  return cache.emplace(std::move(key), std::move(plan)).first->second;
}

}  // namespace meshgate

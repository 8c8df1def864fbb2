// The plan cache of cached_plan_redistribute, as _gen_transform_infos's functools.cache:
// equal inputs give the same Plan object.
#include <functional>
#include <memory>
#include <mutex>
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
  friend bool operator==(const CacheKey&, const CacheKey&) = default;
};

struct CacheKeyHash {
  std::size_t operator()(const CacheKey& k) const noexcept {
    std::size_t h = std::hash<Layout>{}(k.layout) ^ static_cast<std::size_t>(k.model);
    auto mix = [&h](std::size_t v) { h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2); };
    for (const std::string& n : k.names) mix(std::hash<std::string>{}(n));
    for (const auto& [name, layout] : k.flattened) mix(std::hash<Layout>{}(layout));
    for (const Placement& p : k.src) mix(std::hash<Placement>{}(p));
    for (const Placement& p : k.dst) mix(std::hash<Placement>{}(p)*3);
    for (std::int64_t s : k.shape) mix(static_cast<std::size_t>(s));
    for (std::int64_t c : k.coordinate) mix(static_cast<std::size_t>(c) * 7);
    mix(static_cast<std::size_t>(k.element_size));
    mix(static_cast<std::size_t>(k.options.optimize) |
        static_cast<std::size_t>(k.options.planner) << 1 |
        static_cast<std::size_t>(k.options.api) << 3 |
        static_cast<std::size_t>(k.optimization_enabled) << 5);
    return h;
  }
};

}  // namespace

std::shared_ptr<const Plan> cached_plan_redistribute(const DTensorSpec& src, const DTensorSpec& dst,
                                                     std::span<const std::int64_t> coordinate,
                                                     const PlanOptions& options) {
  static std::mutex mutex;
  static std::unordered_map<CacheKey, std::shared_ptr<const Plan>, CacheKeyHash> cache;
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
               transform_optimization_enabled()};
  if (key.coordinate.empty()) key.coordinate.assign(src.mesh.ndim(), 0);
  // Plans for a different mesh or tensor are refused by plan_redistribute below; the key only
  // has to separate what can plan.
  if (!(dst.mesh.layout() == key.layout && dst.mesh.names() == key.names &&
        dst.shape == key.shape && dst.element_size == key.element_size)) {
    return std::make_shared<const Plan>(plan_redistribute(src, dst, coordinate, options));
  }
  {
    std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  auto plan = std::make_shared<const Plan>(plan_redistribute(src, dst, key.coordinate, options));
  std::lock_guard lock(mutex);
  // Bounded like an lru_cache: a sweep over many shapes must not grow memory without end.
  if (cache.size() >= 4096) cache.clear();
  return cache.emplace(key, std::move(plan)).first->second;
}

}  // namespace meshgate

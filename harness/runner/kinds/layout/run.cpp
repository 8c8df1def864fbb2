// The layout kind on meshgate's library: the op applied to the case's arguments, and timed.

#include "kinds/layout/layout_case.hpp"

namespace meshgate::runner::layout_kind {

nlohmann::json LayoutCase::params() const {
  nlohmann::json p = {{"op", op_.name}, {"args", yaml_to_json(args_node_)}};
  if (expected_) p["expect"] = describe(*expected_);
  return p;
}

double LayoutCase::time_calls(RunContext&, std::int64_t calls) {
  const double start = monotonic_seconds();
  for (std::int64_t i = 0; i < calls; ++i) keep_result(apply());
  return monotonic_seconds() - start;
}

}  // namespace meshgate::runner::layout_kind

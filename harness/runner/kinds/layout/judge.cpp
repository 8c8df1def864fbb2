// Judging a layout op's result against `expect`, whoever computed it.

#include "kinds/layout/layout_case.hpp"

namespace meshgate::runner::layout_kind {

Outcome LayoutCase::judge(const Value& actual) const {
  Outcome outcome;
  if (expected_ && actual != *expected_) {
    outcome.status = Status::fail;
    outcome.message = std::string(op_.name) + ": expected " + describe(*expected_) + ", got " +
                      describe(actual);
  }
  outcome.metrics["result"] = describe(actual);
  return outcome;
}

}  // namespace meshgate::runner::layout_kind

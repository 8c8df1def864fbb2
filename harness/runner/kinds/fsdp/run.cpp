// meshgate's own run of an fsdp case: meshgate has no FSDP, the run is a skip.

#include "kinds/fsdp/fsdp_case.hpp"

namespace meshgate::runner::fsdp_kind {

Outcome FsdpCase::run(RunContext&) {
  Outcome o;
  o.status = Status::skip;
  o.message =
      "meshgate has no FSDP (fully_shard is PyTorch's); the case is judged on another "
      "implementation (--impl torch): its parameters after the steps against the same model "
      "trained in one process, and the collectives of each step";
  return o;
}

double FsdpCase::time_calls(RunContext&, std::int64_t) {
  throw std::logic_error("an fsdp case is not timed by meshgate: its run is a skip");
}

}  // namespace meshgate::runner::fsdp_kind

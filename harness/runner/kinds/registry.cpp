// Every case kind, one entry each: adding a built-in kind is its file plus one entry here, which
// describes it (`meshgate-runner list --kinds --json`); tests/test_kind_registry.py then names
// the tables of the driver that must agree (the schemas' kind lists, the gate's signals). Kinds
// of other projects join through register_kind (kind_registry.hpp).
#include <deque>
#include <stdexcept>
#include <string>

#include "case_kind.hpp"
#include "kind_registry.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_layout_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_mesh_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_gemm_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_collective_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_redistribute_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_command_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_fsdp_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_gemm_sweep_case(CaseNode& node, bool expect_error);
const std::vector<std::string>& layout_case_keys();
const std::vector<std::string>& mesh_case_keys();
const std::vector<std::string>& gemm_case_keys();
const std::vector<std::string>& collective_case_keys();
const std::vector<std::string>& redistribute_case_keys();
const std::vector<std::string>& command_case_keys();
const std::vector<std::string>& fsdp_case_keys();
const std::vector<std::string>& gemm_sweep_case_keys();

namespace {

// Built on first use, so that registrars running before main (in whatever order the static
// initializers of the program's files run) always find it. Each entry: name, parse, keys, the
// signals beyond the generic ones (harness/meshgate/gate/signals.py's KIND_METRICS and
// KIND_STRUCTURED, which tests/test_kind_registry.py holds equal to these), whether it speaks
// the implementation protocol, built in.
std::vector<KindEntry>& registry() {
  static std::vector<KindEntry> kinds = {
      {"layout", &parse_layout_case, layout_case_keys(), {"result"}, true, true},
      {"mesh", &parse_mesh_case, mesh_case_keys(), {"layout", "shape", "model_disagreements"},
       true, true},
      {"gemm", &parse_gemm_case, gemm_case_keys(),
       {"flops", "impls", "algorithm", "fingerprints", "numerics_env", "device"}, true, true},
      {"collective", &parse_collective_case, collective_case_keys(),
       {"group_size", "groups", "bytes", "sizes"}, true, true},
      {"redistribute", &parse_redistribute_case, redistribute_case_keys(),
       {"greedy_cost_s", "distinct_plans", "plans_differ_between_ranks",
        "merged_equals_unmerged_bitwise"},
       true, true},
      {"command", &parse_command_case, command_case_keys(), {}, false, true},
      // meshgate has no FSDP: its own run of an fsdp case is a skip, another implementation
      // (--impl torch) answers it.
      {"fsdp", &parse_fsdp_case, fsdp_case_keys(), {"comms_per_step", "bytes_per_step"}, true,
       true},
      // Many shapes in one case: the signals are what it found (counts per failure class and
      // the sorted failing shapes), not how fast it went.
      {"gemm_sweep", &parse_gemm_sweep_case, gemm_sweep_case_keys(),
       {"shapes", "failure_counts", "failing_shapes"}, false, true},
  };
  return kinds;
}

// The names of registered kinds: KindEntry::name is a view, and the caller's string may not
// outlive the call. A deque never moves what it holds.
std::deque<std::string>& registered_names() {
  static std::deque<std::string> names;
  return names;
}

}  // namespace

const std::vector<KindEntry>& case_kinds() {
  return registry();
}

void register_kind(KindEntry entry) {
  if (entry.name.empty()) throw std::invalid_argument("register_kind: the kind has no name");
  const std::string name(entry.name);
  if (!valid_kind_name(name)) {
    throw std::invalid_argument("register_kind: '" + name +
                                "' is no kind name: a letter, then letters, digits, '_', '-' "
                                "or '.'");
  }
  if (entry.parse == nullptr) {
    throw std::invalid_argument("register_kind: kind '" + name + "' has no parse function");
  }
  for (const KindEntry& known : registry()) {
    if (known.name == entry.name) {
      throw std::invalid_argument("register_kind: a kind named '" + name +
                                  "' is registered already");
    }
  }
  entry.name = registered_names().emplace_back(name);
  entry.built_in = false;
  registry().push_back(std::move(entry));
}

}  // namespace meshgate::runner

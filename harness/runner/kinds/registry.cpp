// Every case kind, one entry each: adding a kind is its file plus one line here.
#include "case_kind.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_layout_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_mesh_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_gemm_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_collective_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_redistribute_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_command_case(CaseNode& node, bool expect_error);
const std::vector<std::string>& layout_case_keys();
const std::vector<std::string>& mesh_case_keys();
const std::vector<std::string>& gemm_case_keys();
const std::vector<std::string>& collective_case_keys();
const std::vector<std::string>& redistribute_case_keys();
const std::vector<std::string>& command_case_keys();

const std::vector<KindEntry>& case_kinds() {
  static const std::vector<KindEntry> kinds = {
      {"layout", &parse_layout_case, layout_case_keys()},
      {"mesh", &parse_mesh_case, mesh_case_keys()},
      {"gemm", &parse_gemm_case, gemm_case_keys()},
      {"collective", &parse_collective_case, collective_case_keys()},
      {"redistribute", &parse_redistribute_case, redistribute_case_keys()},
      {"command", &parse_command_case, command_case_keys()},
  };
  return kinds;
}

}  // namespace meshgate::runner

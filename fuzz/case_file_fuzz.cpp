// libFuzzer target: the bytes of one case file through what meshgate-runner does before it
// runs anything — load_case_text (defaults, matrix expansion, name/kind/tags), the duplicate id
// check and prepare_cases with every registered kind — and never a case itself.
// A crash, a sanitizer report, a hang, an exception escaping the loader or an error line that
// does not start with the file's path is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "case_file.hpp"
#include "case_kind.hpp"
#include "validate.hpp"

namespace {

// The path the runner would print for this input; every error must start with it.
constexpr std::string_view kDisplayPath = "fuzz/input.yaml";

void require_named(const std::string& error) {
  const bool named = error.size() > kDisplayPath.size() &&
                     std::string_view(error).substr(0, kDisplayPath.size()) == kDisplayPath &&
                     error[kDisplayPath.size()] == ':';
  if (!named) {
    std::fprintf(stderr, "error line does not start with '%.*s:': %s\n",
                 static_cast<int>(kDisplayPath.size()), kDisplayPath.data(), error.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace runner = meshgate::runner;
  const std::string text(reinterpret_cast<const char*>(data), size);
  runner::LoadedCases loaded;
  runner::load_case_text(text, std::string(kDisplayPath), loaded);
  runner::check_unique_ids(loaded);
  const runner::PlannedCases planned =
      runner::prepare_cases(std::move(loaded.cases), runner::case_kinds());
  for (const std::string& error : loaded.errors) require_named(error);
  for (const std::string& error : planned.errors) require_named(error);
  return 0;
}

#pragma once
// Case kinds from outside meshgate: a project adds its own kind to the runner's registry and
// links meshgate::runner_main, the runner's own main, to get a runner that knows the built-in
// kinds and its own (docs/own-kernels.md).
//
//   std::unique_ptr<PreparedCase> parse_ring_case(CaseNode& node, bool expect_error);
//   MESHGATE_REGISTER_KIND("ring_allreduce", &parse_ring_case, {"ranks", "bytes", "expect.sum"});
//   MESHGATE_REGISTER_KIND("my_gemm", &parse_my_gemm, {"m", "n"}, {"flops"}, /*impl_protocol=*/false);
//
// The macro registers while the program starts, before main runs. Its object file must be part
// of the executable: a static library's member that nothing else refers to is left out by the
// linker, and its kind with it. Link kinds as sources of the executable or as an OBJECT
// library, or link their static library whole ($<LINK_LIBRARY:WHOLE_ARCHIVE,...>); a kind
// that did not make it is reported as an unknown kind, with the list of the known ones.
#include <utility>

#include "case_kind.hpp"

namespace meshgate::runner {

// Appends `entry` to case_kinds(), after the built-in kinds; the name is copied and `built_in`
// cleared. Throws std::invalid_argument for a name that is empty, not a kind name
// (valid_kind_name) or already registered, and for a null parse function.
// Register before the runner reads case files (a registrar's static initializer, or main before
// it calls run_command); case_kinds() is not safe to change while the runner uses it.
void register_kind(KindEntry entry);

// Registers its kind when constructed: one static object per kind (MESHGATE_REGISTER_KIND).
struct KindRegistrar {
  explicit KindRegistrar(KindEntry entry) { register_kind(std::move(entry)); }
};

}  // namespace meshgate::runner

#define MESHGATE_KIND_REGISTRAR_NAME_(line) meshgate_kind_registrar_##line
#define MESHGATE_KIND_REGISTRAR_(line) MESHGATE_KIND_REGISTRAR_NAME_(line)
// MESHGATE_REGISTER_KIND(name, parse [, keys [, signals [, impl_protocol]]]): registers the kind
// `name` (a string) read by `parse` (std::unique_ptr<PreparedCase>(*)(CaseNode&, bool)) with the
// KindEntry fields that follow, in their order, when given: `keys`, a braced list of the dotted
// keys it reads; `signals`, the deterministic signals its rows carry beyond the generic ones;
// `impl_protocol`, whether its cases can go to another implementation (`--impl`). At namespace
// scope, once per kind.
#define MESHGATE_REGISTER_KIND(name, ...)                                            \
  static const ::meshgate::runner::KindRegistrar MESHGATE_KIND_REGISTRAR_(__LINE__)( \
      ::meshgate::runner::KindEntry{name, __VA_ARGS__})

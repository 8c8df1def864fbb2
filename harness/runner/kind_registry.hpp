#pragma once
// Case kinds from outside meshgate: a project adds its own kind to the runner's registry and
// links meshgate::runner_main, the runner's own main, to get a runner that knows the built-in
// kinds and its own (docs/own-kernels.md).
//
//   std::unique_ptr<PreparedCase> parse_ring_case(CaseNode& node, bool expect_error);
//   MESHGATE_REGISTER_KIND("ring_allreduce", &parse_ring_case, {"ranks", "bytes", "expect.sum"});
//
// The macro registers while the program starts, before main runs. Its object file must be part
// of the executable: a static library's member that nothing else refers to is left out by the
// linker, and its kind with it. Link kinds as sources of the executable or as an OBJECT
// library, or link their static library whole ($<LINK_LIBRARY:WHOLE_ARCHIVE,...>); a kind
// that did not make it is reported as an unknown kind, with the list of the known ones.
#include <utility>

#include "case_kind.hpp"

namespace meshgate::runner {

// Appends `entry` to case_kinds(), after the built-in kinds; the name is copied. Throws
// std::invalid_argument for an empty name, a null parse function or a name already registered.
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
// MESHGATE_REGISTER_KIND(name, parse [, keys]): registers the kind `name` (a string) read by
// `parse` (std::unique_ptr<PreparedCase>(*)(CaseNode&, bool)) with its KindEntry::keys, a
// braced list of the dotted keys it reads, when given. At namespace scope, once per kind.
#define MESHGATE_REGISTER_KIND(name, ...)                                            \
  static const ::meshgate::runner::KindRegistrar MESHGATE_KIND_REGISTRAR_(__LINE__)( \
      ::meshgate::runner::KindEntry{name, __VA_ARGS__})

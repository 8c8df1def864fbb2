// read_byte_size of byte_size.hpp: sizes as case keys hold them.
#include "byte_size.hpp"
#include "case_kind.hpp"

namespace meshgate::runner {

std::int64_t read_byte_size(const CaseNode& at, const YAML::Node& value, std::string_view key,
                            ZeroBytes zero) {
  const std::optional<std::int64_t> bytes =
      value.IsScalar() ? parse_byte_size(value.Scalar()) : std::nullopt;
  if (!bytes) {
    at.fail_at(value, key,
               "expected a size in bytes up to 2^62: an integer or one with a unit (B, KiB, MiB, "
               "GiB, TiB), e.g. \"8MiB\", \"4 GiB\", \"16B\"");
  }
  if (*bytes == 0 && zero == ZeroBytes::rejected) {
    reject_value_at(at, value, key, "sizes must be at least 1 B, got 0");
  }
  return *bytes;
}

}  // namespace meshgate::runner

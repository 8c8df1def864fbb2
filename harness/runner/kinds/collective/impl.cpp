// The collective kind handed to another implementation (docs/impl-protocol.md): every group
// rank's inputs as files, and the outputs it answers, counted as meshgate's own run counts them.

#include "kinds/collective/collective_case.hpp"

namespace meshgate::runner::collective_kind {
namespace {

[[noreturn]] void bad(const std::string& why) {
  throw ImplFailure("answered " + why);
}

// The median of a row's answered `time_s`, a non-empty list of numbers >= 0.
double median_time(const nlohmann::json& times, const std::string& where) {
  std::vector<double> samples;
  if (!times.is_array() || times.empty()) {
    bad("the collective size " + where + " with a 'time_s' that is not a non-empty list");
  }
  for (const nlohmann::json& t : times) {
    if (!t.is_number() || !std::isfinite(t.get<double>()) || t.get<double>() < 0) {
      bad("the collective size " + where + " with a time that is not a number >= 0");
    }
    samples.push_back(t.get<double>());
  }
  return median_of(std::move(samples));
}

}  // namespace

std::optional<nlohmann::json> CollectiveCase::impl_request(const std::filesystem::path& dir,
                                           std::string& why) {
  const double members = static_cast<double>(group_size) * static_cast<double>(groups.size());
  double input_bytes = 0;
  for (const std::int64_t bytes : sizes) input_bytes += static_cast<double>(send_bytes(bytes));
  input_bytes *= members;
  if (input_bytes > kImplInputLimitBytes) {
    why = "its inputs hold " + format_byte_size(input_bytes) +
          " over every rank and size, more than the " + format_byte_size(kImplInputLimitBytes) +
          " handed to another implementation as files per case";
    return std::nullopt;
  }
  const std::string dtype_name(comm::to_string(dtype));
  const Codec codec{dtype, element_size()};
  std::vector<std::byte> host;
  std::vector<nlohmann::json> inputs_of_size;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    nlohmann::json inputs = nlohmann::json::object();
    host.resize(send_bytes(sizes[s]));
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      const Values values = values_of(static_cast<int>(gi));
      for (std::size_t g = 0; g < groups[gi].size(); ++g) {
        const std::size_t n =
            fill_send(host.data(), codec, values, sizes[s], static_cast<int>(g));
        const std::string rank = std::to_string(groups[gi][g]);
        inputs[rank] = write_tensor_file(
            dir / ("input-" + std::to_string(s) + "-rank-" + rank + ".bin"), dtype_name,
            {static_cast<std::int64_t>(n)}, host.data(), n * element_size());
      }
    }
    inputs_of_size.push_back(std::move(inputs));
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const bool in_place : inplace) {
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      rows.push_back({{"bytes", sizes[s]},
                      {"count", count_of(sizes[s])},
                      {"inplace", in_place},
                      {"inputs", inputs_of_size[s]}});
    }
  }
  return nlohmann::json{
      {"op", std::string(op->name)},
      {"dtype", dtype_name},
      {"reduce", reduce ? nlohmann::json(std::string(to_string(*reduce))) : nlohmann::json()},
      {"root", op->has_root ? nlohmann::json(root) : nlohmann::json()},
      {"groups", groups},
      {"world", case_ranks},
      {"sizes", rows}};
}

Outcome CollectiveCase::check_observables(const nlohmann::json& observables,
                                          const std::filesystem::path& dir) {
  if (!observables.is_object() || !observables.contains("sizes") ||
      !observables["sizes"].is_array()) {
    bad("collective observables without a list 'sizes'");
  }
  const nlohmann::json& answered = observables["sizes"];
  const std::size_t rows = inplace.size() * sizes.size();
  if (answered.size() != rows) {
    bad(std::to_string(answered.size()) + " collective size(s) where the request has " +
        std::to_string(rows));
  }
  std::vector<SizeResult> results;
  std::size_t row = 0;
  for (const bool in_place : inplace) {
    for (const std::int64_t bytes : sizes) {
      results.push_back(read_row(answered[row++], bytes, in_place, dir));
    }
  }
  return judge(results);
}

// One answered row: a declined row, or every group rank's output (and an out-of-place broadcast
// root's send) counted by the check of meshgate's own run, and the median of its times.
SizeResult CollectiveCase::read_row(const nlohmann::json& entry, std::int64_t bytes,
                                    bool in_place, const std::filesystem::path& dir) const {
  const std::string dtype_name(comm::to_string(dtype));
  const Codec codec{dtype, element_size()};
  const std::string where = format_byte_size(static_cast<double>(bytes), ByteSizeStyle::exact) +
                            (in_place ? " in place" : " out of place");
  SizeResult r;
  r.bytes = bytes;
  r.inplace = in_place;
  r.unsupported = unsupported_row(entry, "the collective size " + where);
  if (r.unsupported) return r;
  if (!entry.is_object() || !entry.contains("outputs") || !entry["outputs"].is_object()) {
    bad("the collective size " + where + " without an object 'outputs'");
  }
  // The buffer of `rank` in entry[key] ("outputs" or "sends"), of the case's dtype and
  // the op's element count.
  const auto tensor = [&](const char* key, const char* noun, int rank, std::size_t elements) {
    const nlohmann::json& map = entry[key];
    const std::string name = std::to_string(rank);
    const std::string what = std::string(noun) + " of rank " + name + " at " + where;
    if (!map.contains(name)) bad("no " + what);
    TensorFile t = read_tensor_file(map[name], dir, "the " + what);
    if (t.dtype != dtype_name) {
      bad("the " + what + " as " + t.dtype + " where the case's dtype is " + dtype_name);
    }
    if (t.bytes.size() != elements * element_size()) {
      bad("the " + what + " with " + std::to_string(t.bytes.size() / element_size()) +
          " element(s) where the op's buffer has " + std::to_string(elements));
    }
    return t;
  };
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const Values values = values_of(static_cast<int>(gi));
    for (std::size_t g = 0; g < groups[gi].size(); ++g) {
      const int rank = groups[gi][g];
      const TensorFile out = tensor("outputs", "output", rank, recv_bytes(bytes) / element_size());
      r.wrong += wrong_in_output(reinterpret_cast<const std::byte*>(out.bytes.data()), codec,
                                 values, bytes, static_cast<int>(g));
      if (checks_send(in_place, static_cast<int>(g))) {
        if (!entry.contains("sends") || !entry["sends"].is_object()) {
          bad("the out-of-place broadcast at " + where +
              " without an object 'sends' (the roots' send buffers after the call)");
        }
        const TensorFile send = tensor("sends", "send", rank, count_of(bytes));
        r.wrong += wrong_in_send(reinterpret_cast<const std::byte*>(send.bytes.data()), codec,
                                 values, bytes);
      }
    }
  }
  if (entry.contains("time_s")) r.time_s = median_time(entry["time_s"], where);
  return r;
}

}  // namespace meshgate::runner::collective_kind

// kind: collective — one collective (all_reduce, all_gather, reduce_scatter, all_to_all,
// broadcast) on the groups of a mesh dim (or of several dims flattened), over a list or sweep
// of sizes, in place and out of place. As nccl-tests: inputs are small integers generated from
// (seed, rank, index) so that every result is exactly representable, every rank counts its
// wrong output elements and the counts are summed over the ranks; any wrong element fails the
// case. Every size is timed (max over ranks; with perf: the median per-call time of the timed
// samples, each a batch of calls sized as the runner sizes its own, timing.hpp), and reported as
// time, algbw and busbw with nccl-tests' bus factors.
// Another implementation (external_impl.hpp) gets the same inputs as files and answers each
// rank's outputs, which the same check counts and the same table reports; a row it declines
// (an in-place row of an op its API has no in-place form of) is a skip in that table, and the
// case is judged on the rows it ran.
// What differs between the collectives (buffers, inputs, expected outputs, bus factor, the call)
// is in their entries of collective_table.hpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "byte_size.hpp"
#include "case_kind.hpp"
#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/half_float.hpp"
#include "external_impl.hpp"
#include "kinds/case_values.hpp"
#include "kinds/collective_table.hpp"
#include "kinds/memory_estimates.hpp"
#include "kinds/mesh_spec.hpp"
#include "mesh/device_mesh.hpp"
#include "plan/cost_model.hpp"
#include "timing.hpp"

namespace meshgate::runner {
namespace {

using comm::DType;
using comm::ReduceOp;

// ---- exact values -------------------------------------------------------------------------

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The largest magnitude up to which every integer is exact in the dtype, kept small enough
// that generation stays cheap and int8/uint8 keep a value (127/255) free for the sentinel.
std::int64_t exact_limit(DType d) {
  switch (d) {
    case DType::f16:
      return 2048;
    case DType::bf16:
      return 256;
    case DType::i8:
      return 100;
    case DType::u8:
      return 200;
    default:
      return std::int64_t{1} << 20;
  }
}

// The largest k with 2^k <= limit: how many factors of 2 a product may hold and stay exact.
int exact_doublings(std::int64_t limit) {
  int k = 0;
  while ((std::int64_t{2} << k) <= limit) ++k;
  return k;
}

// The largest input magnitude of an avg on a group of n, before the multiplication by n that
// makes the average an integer: at least 1 for a case the kind accepts (n <= exact_limit).
std::int64_t avg_budget(DType d, int n) {
  return exact_limit(d) / n;
}

// Inputs and expected outputs of one group: element `index` of group rank `rank`. Every
// partial result of a reduction, in whatever order a backend combines the ranks, stays within
// exact_limit, so every expected value is exact. A large group leaves no room for every rank to
// add a non-zero value to every element (bfloat16 sums on 512 ranks, or an avg on 32, would
// all be 0 and nothing would be checked), so each element has a window of active ranks,
// starting at rank index % n: they contribute values that are never the op's identity (0 for
// sum and avg, 1 for product), the others the identity. Every rank is active on some elements,
// where losing or repeating its contribution changes the result.
class Values {
 public:
  Values(std::uint64_t seed, DType dtype, std::optional<ReduceOp> reduce, int n)
      : seed_(seed), reduce_(reduce), n_(n), unsigned_(dtype == DType::u8) {
    const std::int64_t limit = exact_limit(dtype);
    // Non-reducing ops, max and min: any exact value, on every rank.
    hi_ = limit;
    lo_ = unsigned_ ? 0 : -limit;
    active_ = n;
    if (reduce == ReduceOp::sum) {
      active_ = static_cast<int>(std::min<std::int64_t>(n, limit));
      magnitude_ = limit / active_;
    } else if (reduce == ReduceOp::avg) {
      const std::int64_t budget = avg_budget(dtype, n);  // inputs are n * base
      active_ = static_cast<int>(std::min<std::int64_t>(n, budget));
      magnitude_ = budget / active_;
    } else if (reduce == ReduceOp::product) {
      active_ = std::min(n, exact_doublings(limit));
      magnitude_ = 2;
    }
  }

  std::int64_t input(int rank, std::uint64_t index) const {
    const std::uint64_t h = mix(seed_ ^ mix(static_cast<std::uint64_t>(rank) * 0x100000001B3ull +
                                            index * 0x9E3779B97F4A7C15ull));
    const bool sums = reduce_ == ReduceOp::sum || reduce_ == ReduceOp::avg;
    if (!sums && reduce_ != ReduceOp::product) {
      return lo_ + static_cast<std::int64_t>(h % static_cast<std::uint64_t>(hi_ - lo_ + 1));
    }
    const std::int64_t sign = (!unsigned_ && (h & 1u)) ? -1 : 1;
    const auto first = static_cast<int>(index % static_cast<std::uint64_t>(n_));
    const bool active = (rank - first + n_) % n_ < active_;
    if (reduce_ == ReduceOp::product) return sign * (active ? 2 : 1);
    if (!active) return 0;
    const std::int64_t base =
        sign * (1 + static_cast<std::int64_t>((h >> 1) % static_cast<std::uint64_t>(magnitude_)));
    return reduce_ == ReduceOp::avg ? base * n_ : base;
  }

  std::int64_t reduced(std::uint64_t index) const {
    std::int64_t acc = input(0, index);
    for (int r = 1; r < n_; ++r) {
      const std::int64_t v = input(r, index);
      switch (*reduce_) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          acc += v;
          break;
        case ReduceOp::max:
          acc = std::max(acc, v);
          break;
        case ReduceOp::min:
          acc = std::min(acc, v);
          break;
        case ReduceOp::product:
          acc *= v;
          break;
      }
    }
    return *reduce_ == ReduceOp::avg ? acc / n_ : acc;
  }

 private:
  std::uint64_t seed_;
  std::optional<ReduceOp> reduce_;
  int n_;
  bool unsigned_;
  std::int64_t lo_ = 0;
  std::int64_t hi_ = 0;
  int active_ = 1;              // ranks with a non-identity input per element (reductions)
  std::int64_t magnitude_ = 1;  // their largest |input| (times n for avg)
};

// Reads and writes elements of one dtype in a host buffer.
struct Codec {
  DType dtype;
  std::size_t size;

  void put(std::byte* buffer, std::size_t i, std::int64_t v) const {
    std::byte* at = buffer + i * size;
    switch (dtype) {
      case DType::f32:
        store(at, static_cast<float>(v));
        break;
      case DType::f64:
        store(at, static_cast<double>(v));
        break;
      case DType::f16:
        store(at, float_to_half(static_cast<float>(v)));
        break;
      case DType::bf16:
        store(at, float_to_bf16(static_cast<float>(v)));
        break;
      case DType::i32:
        store(at, static_cast<std::int32_t>(v));
        break;
      case DType::i64:
        store(at, v);
        break;
      case DType::i8:
        store(at, static_cast<std::int8_t>(v));
        break;
      case DType::u8:
        store(at, static_cast<std::uint8_t>(v));
        break;
    }
  }
  // A value no generated input or result has: NaN, or the type's largest value.
  void put_sentinel(std::byte* buffer, std::size_t i) const {
    std::byte* at = buffer + i * size;
    switch (dtype) {
      case DType::f32:
        store(at, std::numeric_limits<float>::quiet_NaN());
        break;
      case DType::f64:
        store(at, std::numeric_limits<double>::quiet_NaN());
        break;
      case DType::f16:
        store(at, std::uint16_t{0x7E00});
        break;
      case DType::bf16:
        store(at, std::uint16_t{0x7FC0});
        break;
      case DType::i32:
        store(at, std::numeric_limits<std::int32_t>::max());
        break;
      case DType::i64:
        store(at, std::numeric_limits<std::int64_t>::max());
        break;
      case DType::i8:
        store(at, std::numeric_limits<std::int8_t>::max());
        break;
      case DType::u8:
        store(at, std::numeric_limits<std::uint8_t>::max());
        break;
    }
  }
  bool equals(const std::byte* buffer, std::size_t i, std::int64_t expected) const {
    const std::byte* at = buffer + i * size;
    switch (dtype) {
      case DType::f32:
        return load<float>(at) == static_cast<double>(expected);
      case DType::f64:
        return load<double>(at) == static_cast<double>(expected);
      case DType::f16:
        return half_to_float(load<std::uint16_t>(at)) == static_cast<float>(expected);
      case DType::bf16:
        return bf16_to_float(load<std::uint16_t>(at)) == static_cast<float>(expected);
      case DType::i32:
        return load<std::int32_t>(at) == expected;
      case DType::i64:
        return load<std::int64_t>(at) == expected;
      case DType::i8:
        return load<std::int8_t>(at) == expected;
      case DType::u8:
        return load<std::uint8_t>(at) == expected;
    }
    return false;
  }

 private:
  template <class T>
  static void store(std::byte* at, T v) {
    std::memcpy(at, &v, sizeof v);
  }
  template <class T>
  static T load(const std::byte* at) {
    T v;
    std::memcpy(&v, at, sizeof v);
    return v;
  }
};

// ---- the case -----------------------------------------------------------------------------

struct SizeResult {
  std::int64_t bytes = 0;
  bool inplace = false;
  double time_s = 0;
  std::int64_t wrong = 0;
  // With perf, timed here: how many calls each of the size's timed samples made.
  std::optional<std::int64_t> calls_per_sample;
  // Why another implementation did not run this row ({"unsupported": REASON} in its answer):
  // the row is a skip in the table, and neither time nor wrong elements are counted for it.
  std::optional<std::string> unsupported;
};

// What one rank keeps between run() and the runner's timed iterations: its group's
// communicator and the buffers of the largest size.
struct RankState {
  std::unique_ptr<comm::Communicator> group;
  void* send = nullptr;
  void* recv = nullptr;

  RankState() = default;
  RankState(const RankState&) = delete;
  RankState& operator=(const RankState&) = delete;
  RankState(RankState&&) = default;
  RankState& operator=(RankState&&) = default;
  ~RankState() { release(); }
  void release() {
    if (group) {
      if (send != nullptr) group->deallocate(send);
      if (recv != nullptr && recv != send) group->deallocate(recv);
    }
    send = recv = nullptr;
    group.reset();
  }
};

// An all_reduce of a few host values over `comm`, through the backend's own memory (device
// memory for nccl), in place.
template <class T>
void reduce_host(comm::Communicator& comm, T* values, std::size_t n, DType dtype, ReduceOp op) {
  const std::size_t bytes = n * sizeof(T);
  void* buffer = comm.allocate(bytes);
  try {
    comm.copy_from_host(buffer, values, bytes);
    comm.all_reduce(buffer, buffer, n, dtype, op);
    comm.synchronize();
    comm.copy_to_host(values, buffer, bytes);
  } catch (...) {
    comm.deallocate(buffer);
    throw;
  }
  comm.deallocate(buffer);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The median of a size's timed iterations: what its row of the table reports.
double median_of(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  if (n == 0) return 0;
  return n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

// The input files handed to another implementation are written, and its outputs read back, for
// every rank and size; above this they would cost more time than the collectives they check.
constexpr double kImplInputLimitBytes = 256.0 * 1024 * 1024;

class CollectiveCase final : public PreparedCase {
 public:
  const CollectiveEntry* op = nullptr;  // the collective's entry of collective_table()
  DType dtype = DType::f32;
  std::optional<ReduceOp> reduce;
  int root = 0;
  std::uint64_t seed = 0;
  std::vector<std::int64_t> sizes;  // bytes, nccl-tests meaning
  std::vector<bool> inplace = {false};
  std::vector<std::vector<int>> groups;  // case ranks of every group
  int group_size = 1;
  int case_ranks = 1;
  nlohmann::json params_json;
  // The mesh and group dims (indices) for the alpha-beta cost model of lib/plan.
  std::optional<DeviceMesh> mesh;
  std::vector<std::int64_t> dims;
  // The runner times only cases that do not expect a rejection: only then run() keeps buffers.
  bool expect_error = false;

  int ranks() const override { return case_ranks; }
  nlohmann::json params() const override { return params_json; }

  // Every rank of a group holds the send and receive buffers of the largest size and a host
  // staging buffer as large as either (plus the threads backend's scratch copy for an in-place
  // all_to_all); the threads backend holds every rank in this process.
  MemoryEstimate memory_estimate() const override {
    const std::int64_t largest = *std::max_element(sizes.begin(), sizes.end());
    const double send = static_cast<double>(send_bytes(largest));
    const double recv = static_cast<double>(recv_bytes(largest));
    const double staging = std::max(send, static_cast<double>(recv_bytes(largest)));
    const bool scratch =
        op->in_place_scratch && std::find(inplace.begin(), inplace.end(), true) != inplace.end();
    const double per_rank = send + recv + staging + (scratch ? recv : 0.0);
    std::string detail = std::to_string(group_size * static_cast<int>(groups.size())) +
                         " ranks x (send " + format_byte_size(send);
    if (recv > 0) detail += " + receive " + format_byte_size(recv);
    detail += " + host staging " + format_byte_size(staging);
    if (scratch) {
      detail += " + in-place " + std::string(op->name) + " scratch " + format_byte_size(recv);
    }
    return {per_rank * group_size * static_cast<double>(groups.size()), "bytes", detail + ")"};
  }

  Outcome run(RunContext& ctx) override {
    const std::optional<PerfSpec> perf = ctx.perf();
    states_.clear();
    states_.resize(static_cast<std::size_t>(case_ranks));
    std::vector<std::vector<SizeResult>> per_rank(static_cast<std::size_t>(case_ranks));
    try {
      ctx.run_on_ranks(case_ranks, [&](int rank, comm::Communicator& case_comm) {
        per_rank[static_cast<std::size_t>(rank)] = run_rank(rank, case_comm, perf);
      });
    } catch (...) {
      release_states();
      throw;
    }
    const std::vector<SizeResult>& results = per_rank[static_cast<std::size_t>(ctx.lead_rank())];
    Outcome outcome = judge(results);
    if (outcome.status != Status::pass || !perf || expect_error) release_states();
    return outcome;
  }

  // `calls` calls of the largest size (the first in-place setting) on the buffers run() kept.
  double time_calls(RunContext& ctx, std::int64_t calls) override {
    std::vector<double> times(static_cast<std::size_t>(case_ranks), 0.0);
    run_guarded(ctx, [&](int rank, comm::Communicator& case_comm) {
      RankState& state = states_.at(static_cast<std::size_t>(rank));
      const std::int64_t bytes = *std::max_element(sizes.begin(), sizes.end());
      times[static_cast<std::size_t>(rank)] =
          timed_calls(case_comm, state, bytes, inplace.front(), group_rank_of(rank), calls);
    });
    return times[static_cast<std::size_t>(ctx.lead_rank())];
  }

  void release() override { release_states(); }

  // Every group rank's send buffer of every size, as meshgate's own run fills it, in one file
  // per (size, rank): the in-place and out-of-place rows of a size share their inputs.
  std::optional<nlohmann::json> impl_request(const std::filesystem::path& dir,
                                             std::string& why) override {
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

  // Each row's outputs (and an out-of-place broadcast root's send) counted by the check of
  // meshgate's own run; its time is the median of the answered iterations.
  Outcome check_observables(const nlohmann::json& observables,
                            const std::filesystem::path& dir) override {
    const auto bad = [](const std::string& why) -> void { throw ImplFailure("answered " + why); };
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
    const std::string dtype_name(comm::to_string(dtype));
    const Codec codec{dtype, element_size()};
    std::vector<SizeResult> results;
    std::size_t row = 0;
    for (const bool in_place : inplace) {
      for (const std::int64_t bytes : sizes) {
        const nlohmann::json& entry = answered[row++];
        const std::string where =
            format_byte_size(static_cast<double>(bytes), ByteSizeStyle::exact) +
            (in_place ? " in place" : " out of place");
        SizeResult r;
        r.bytes = bytes;
        r.inplace = in_place;
        r.unsupported = unsupported_row(entry, "the collective size " + where);
        if (r.unsupported) {
          results.push_back(r);
          continue;
        }
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
            const TensorFile out =
                tensor("outputs", "output", rank, recv_bytes(bytes) / element_size());
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
        if (entry.contains("time_s")) {
          const nlohmann::json& times = entry["time_s"];
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
          r.time_s = median_of(std::move(samples));
        }
        results.push_back(r);
      }
    }
    return judge(results);
  }

 private:
  std::vector<RankState> states_;

  // The verdict and the per-size table of every (in-place setting, size) row, in the order
  // they ran: the same for meshgate's own run and for another implementation's answer.
  Outcome judge(const std::vector<SizeResult>& results) const {
    Outcome outcome;
    nlohmann::json table = nlohmann::json::array();
    std::int64_t total_wrong = 0;
    std::string wrong_sizes;
    const double factor = op->bus_factor(group_size);
    std::optional<SizeResult> largest;
    // The rows another implementation declined, by reason (in the order first seen), and how
    // many there are.
    std::vector<std::pair<std::string, std::string>> declined;
    std::size_t declined_rows = 0;
    for (const SizeResult& r : results) {
      if (r.unsupported) {
        // The row's identity as meshgate's own run writes it, so that the table's shape (and
        // the signals made from it) is the same whichever implementation ran; no measurement.
        table.push_back({{"bytes", r.bytes},
                         {"count", count_of(r.bytes)},
                         {"inplace", r.inplace},
                         {"modeled_time_s", modeled(r.bytes)},
                         {"status", "skip"},
                         {"reason", *r.unsupported}});
        const std::string row = row_name(r);
        const auto same = std::find_if(declined.begin(), declined.end(),
                                       [&](const auto& d) { return d.first == *r.unsupported; });
        if (same == declined.end()) {
          declined.emplace_back(*r.unsupported, row);
        } else {
          same->second += ", " + row;
        }
        ++declined_rows;
        continue;
      }
      const double algbw = r.time_s > 0 ? static_cast<double>(r.bytes) / r.time_s / 1e9 : 0.0;
      table.push_back({{"bytes", r.bytes},
                       {"count", count_of(r.bytes)},
                       {"time_s", r.time_s},
                       {"algbw_GBps", algbw},
                       {"busbw_GBps", algbw * factor},
                       {"wrong", r.wrong},
                       {"inplace", r.inplace},
                       {"modeled_time_s", modeled(r.bytes)}});
      if (r.calls_per_sample) table.back()["calls_per_sample"] = *r.calls_per_sample;
      total_wrong += r.wrong;
      if (r.wrong > 0) {
        wrong_sizes +=
            (wrong_sizes.empty() ? "" : ", ") + row_name(r) + ": " + std::to_string(r.wrong);
      }
      if (!largest || r.bytes > largest->bytes) largest = r;
    }
    outcome.metrics["sizes"] = table;
    outcome.metrics["wrong"] = total_wrong;
    outcome.metrics["group_size"] = group_size;
    outcome.metrics["groups"] = groups.size();
    if (largest) {
      const double algbw =
          largest->time_s > 0 ? static_cast<double>(largest->bytes) / largest->time_s / 1e9 : 0.0;
      outcome.metrics["bytes"] = largest->bytes;
      outcome.metrics["modeled_time_s"] = modeled(largest->bytes);
      outcome.metrics["algbw_GBps"] = algbw;
      outcome.metrics["busbw_GBps"] = algbw * factor;
    }
    outcome.plan = {plan_line()};
    outcome.console_detail = console_table(results);
    if (total_wrong > 0) {
      outcome.status = Status::fail;
      outcome.message = std::to_string(total_wrong) + " wrong element(s) summed over the ranks (" +
                        wrong_sizes + "); expected exact results";
    }
    if (declined_rows > 0) {
      std::string text = std::to_string(declined_rows) + " of " + std::to_string(results.size()) +
                         " rows not run by the implementation";
      for (const auto& [reason, rows] : declined) text += "; " + rows + ": " + reason;
      if (declined_rows == results.size()) {
        // Nothing ran: nothing was judged (no count of wrong elements that would read as 0),
        // and the case is a skip that says why.
        outcome.status = Status::skip;
        outcome.message = std::move(text);
        outcome.metrics.erase("wrong");
      } else {
        outcome.message += (outcome.message.empty() ? "" : "; ") + text;
      }
    }
    return outcome;
  }

  // "8 B out-of-place": a row of the per-size table in messages.
  static std::string row_name(const SizeResult& r) {
    return format_byte_size(static_cast<double>(r.bytes), ByteSizeStyle::exact) +
           (r.inplace ? " in-place" : " out-of-place");
  }

  std::size_t element_size() const { return comm::element_size(dtype); }

  // The generated values of the group with this index: every group has its own inputs.
  Values values_of(int group_index) const {
    return Values(seed ^ mix(static_cast<std::uint64_t>(group_index) + 1), dtype, reduce,
                  group_size);
  }

  // The cost model's time for one call of `bytes` on the case's groups (default topology: 8
  // ranks per node), a deterministic number beside the measured one.
  double modeled(std::int64_t bytes) const {
    return modeled_time(*mesh, dims, parse_collective_op(op->name), bytes);
  }
  CollectiveBuffers buffers(std::int64_t bytes) const {
    return op->buffers(bytes, element_size(), group_size);
  }
  // Per-rank element count of the Communicator call for a size in bytes.
  std::size_t count_of(std::int64_t bytes) const { return buffers(bytes).count; }
  std::size_t send_bytes(std::int64_t bytes) const { return buffers(bytes).send_bytes; }
  std::size_t recv_bytes(std::int64_t bytes) const { return buffers(bytes).recv_bytes; }

  // (group index, rank in the group) of a case rank; group -1 when the rank is in no group.
  std::pair<int, int> place_of(int rank) const {
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const auto it = std::find(groups[g].begin(), groups[g].end(), rank);
      if (it != groups[g].end())
        return {static_cast<int>(g), static_cast<int>(it - groups[g].begin())};
    }
    return {-1, -1};
  }
  int group_rank_of(int rank) const { return place_of(rank).second; }

  std::string plan_line() const {
    std::string line = std::string(op->name) + "(" + std::string(comm::to_string(dtype));
    if (reduce) line += ", " + std::string(to_string(*reduce));
    if (op->has_root) line += ", root=" + std::to_string(root);
    return line + ") on " + std::to_string(groups.size()) + " group(s) of " +
           std::to_string(group_size);
  }

  // Pointers of the call for one size: in place as NCCL defines it.
  using Call = CollectiveEntry::Pointers;
  Call call_buffers(const RankState& state, std::int64_t bytes, bool in_place, int g) const {
    auto* send = static_cast<std::byte*>(state.send);
    auto* recv = static_cast<std::byte*>(state.recv);
    if (!in_place) return {send, recv};
    return op->in_place(send, recv, count_of(bytes) * element_size(), g);
  }

  void issue(comm::Communicator& group, const Call& call, std::int64_t bytes) const {
    op->call(group, call.send, call.recv, CallArgs{count_of(bytes), dtype, reduce, root});
  }

  // Seconds of `calls` calls back to back, the slowest rank's: every group calls at once after
  // a barrier of the whole case (ranks in no group only join the barrier and the maximum). As
  // in nccl-tests, the calls of a batch are issued one after the other and waited for once.
  double timed_calls(comm::Communicator& case_comm, RankState& state, std::int64_t bytes,
                     bool in_place, int g, std::int64_t calls) const {
    case_comm.barrier();
    double mine = 0;
    if (state.group) {
      const Call call = call_buffers(state, bytes, in_place, g);
      const double start = now_s();
      for (std::int64_t i = 0; i < calls; ++i) issue(*state.group, call, bytes);
      state.group->synchronize();
      mine = now_s() - start;
    }
    reduce_host(case_comm, &mine, 1, DType::f64, ReduceOp::max);
    return mine;
  }

  std::vector<SizeResult> run_rank(int rank, comm::Communicator& case_comm,
                                   const std::optional<PerfSpec>& perf) {
    RankState& state = states_[static_cast<std::size_t>(rank)];
    state.group = case_comm.split(groups);
    // Plain variables, not a structured binding: the lambdas below capture g, and clang 14 (the
    // fuzz preset) cannot capture a binding, which C++20 allows and gcc accepts.
    const std::pair<int, int> place = place_of(rank);
    const int group_index = place.first;
    const int g = place.second;
    const std::int64_t largest = *std::max_element(sizes.begin(), sizes.end());
    const Codec codec{dtype, element_size()};
    const Values values = values_of(group_index);
    std::vector<std::byte> host;
    // Every rank of the case times batches of the same size.
    const AgreeOnCalls agree = [&](std::int64_t calls) {
      reduce_host(case_comm, &calls, 1, DType::i64, ReduceOp::max);
      return calls;
    };
    if (state.group) {
      // Separate send and receive buffers; in place, call_buffers points into one of them.
      state.send = state.group->allocate(std::max<std::size_t>(send_bytes(largest), 1));
      state.recv = state.group->allocate(std::max<std::size_t>(recv_bytes(largest), 1));
      host.resize(std::max(send_bytes(largest), recv_bytes(largest)));
    }

    std::vector<SizeResult> results;
    for (const bool in_place : inplace) {
      for (const std::int64_t bytes : sizes) {
        SizeResult r;
        r.bytes = bytes;
        r.inplace = in_place;
        if (state.group) prepare(state, host, codec, values, bytes, in_place, g);
        r.time_s = timed_calls(case_comm, state, bytes, in_place, g, 1);
        if (state.group) r.wrong = count_wrong(state, host, codec, values, bytes, in_place, g);
        if (perf) {
          const TimedSamples samples = measure_calls(
              [&](std::int64_t calls) {
                return timed_calls(case_comm, state, bytes, in_place, g, calls);
              },
              *perf, agree);
          r.time_s = median_of(samples.per_call_s);
          r.calls_per_sample = samples.calls_per_sample;
        }
        results.push_back(r);
      }
    }
    // Every rank counted its own output; the case's verdict is the sum over all of them.
    std::vector<std::int64_t> wrong;
    for (const SizeResult& r : results) wrong.push_back(r.wrong);
    reduce_host(case_comm, wrong.data(), wrong.size(), DType::i64, ReduceOp::sum);
    for (std::size_t i = 0; i < results.size(); ++i) results[i].wrong = wrong[i];
    return results;
  }

  // Fills the call's buffers: the output with the sentinel, then this rank's inputs
  // (fill_send).
  void prepare(RankState& state, std::vector<std::byte>& host, const Codec& codec,
               const Values& values, std::int64_t bytes, bool in_place, int g) const {
    comm::Communicator& group = *state.group;
    const std::size_t es = element_size();
    const Call call = call_buffers(state, bytes, in_place, g);
    const std::size_t out_elements = recv_bytes(bytes) / es;
    for (std::size_t i = 0; i < out_elements; ++i) codec.put_sentinel(host.data(), i);
    group.copy_from_host(call.recv, host.data(), out_elements * es);
    const std::size_t in_elements = fill_send(host.data(), codec, values, bytes, g);
    group.copy_from_host(call.send, host.data(), in_elements * es);
  }

  // Writes the send buffer of group rank `g` for a size into `host` and returns its element
  // count. A broadcast's input is the root's alone: the other ranks' send holds the sentinel,
  // so that a backend which reads it, or leaves any recv unwritten (the root's included), is
  // counted wrong.
  std::size_t fill_send(std::byte* host, const Codec& codec, const Values& values,
                        std::int64_t bytes, int g) const {
    const std::size_t in_elements = send_bytes(bytes) / element_size();
    for (std::size_t i = 0; i < in_elements; ++i) {
      if (op->sends_input(g, root)) {
        codec.put(host, i, values.input(g, i));
      } else {
        codec.put_sentinel(host, i);
      }
    }
    return in_elements;
  }

  std::int64_t count_wrong(RankState& state, std::vector<std::byte>& host, const Codec& codec,
                           const Values& values, std::int64_t bytes, bool in_place, int g) const {
    comm::Communicator& group = *state.group;
    const std::size_t es = element_size();
    const Call call = call_buffers(state, bytes, in_place, g);
    group.copy_to_host(host.data(), call.recv, recv_bytes(bytes));
    std::int64_t wrong = wrong_in_output(host.data(), codec, values, bytes, g);
    if (checks_send(in_place, g)) {
      group.copy_to_host(host.data(), call.send, count_of(bytes) * es);
      wrong += wrong_in_send(host.data(), codec, values, bytes);
    }
    return wrong;
  }

  // The output elements of group rank `g` that differ from the exact result.
  std::int64_t wrong_in_output(const std::byte* out, const Codec& codec, const Values& values,
                               std::int64_t bytes, int g) const {
    const std::size_t count = count_of(bytes);
    const std::size_t out_elements = recv_bytes(bytes) / element_size();
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < out_elements; ++i) {
      const ExpectedValue e = op->expected(i, count, g, root);
      const std::int64_t expected =
          e.reduced ? values.reduced(e.index) : values.input(e.rank, e.index);
      if (!codec.equals(out, i, expected)) ++wrong;
    }
    return wrong;
  }

  // Out of place, the root's send is only read: an element the call changed is wrong too.
  bool checks_send(bool in_place, int g) const { return op->has_root && !in_place && g == root; }
  std::int64_t wrong_in_send(const std::byte* send, const Codec& codec, const Values& values,
                             std::int64_t bytes) const {
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < count_of(bytes); ++i) {
      if (!codec.equals(send, i, values.input(root, i))) ++wrong;
    }
    return wrong;
  }

  std::string console_table(const std::vector<SizeResult>& results) const {
    const double factor = op->bus_factor(group_size);
    std::string out;
    char line[256];
    std::snprintf(line, sizeof line,
                  "      %12s %12s %8s %7s %5s  %10s %8s %8s %7s  %10s %8s %8s %7s\n", "size",
                  "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                  "algbw", "busbw", "#wrong");
    out += line;
    std::snprintf(line, sizeof line,
                  "      %12s %12s %8s %7s %5s  %10s %8s %8s %7s  %10s %8s %8s %7s\n", "(B)",
                  "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                  "(GB/s)", "");
    out += line;
    out += "      " + std::string(62, ' ') + "out-of-place" + std::string(30, ' ') + "in-place\n";
    std::vector<std::int64_t> seen;
    for (const SizeResult& r : results) {
      if (std::find(seen.begin(), seen.end(), r.bytes) != seen.end()) continue;
      seen.push_back(r.bytes);
      std::string cells[2];
      for (const SizeResult& v : results) {
        if (v.bytes != r.bytes) continue;
        if (v.unsupported) {
          char skipped[96];
          std::snprintf(skipped, sizeof skipped, "  %10s %8s %8s %7s", "skip", "-", "-", "-");
          cells[v.inplace ? 1 : 0] = skipped;
          continue;
        }
        const double algbw = v.time_s > 0 ? static_cast<double>(v.bytes) / v.time_s / 1e9 : 0.0;
        char cell[96];
        std::snprintf(cell, sizeof cell, "  %10.2f %8.2f %8.2f %7lld", v.time_s * 1e6, algbw,
                      algbw * factor, static_cast<long long>(v.wrong));
        cells[v.inplace ? 1 : 0] = cell;
      }
      for (std::string& cell : cells) {
        if (cell.empty()) {
          char empty[96];
          std::snprintf(empty, sizeof empty, "  %10s %8s %8s %7s", "-", "-", "-", "-");
          cell = empty;
        }
      }
      std::snprintf(line, sizeof line, "      %12lld %12zu %8s %7s %5s",
                    static_cast<long long>(r.bytes), count_of(r.bytes),
                    std::string(comm::to_string(dtype)).c_str(),
                    reduce ? std::string(to_string(*reduce)).c_str() : "-",
                    op->has_root ? std::to_string(root).c_str() : "-");
      out += line + cells[0] + cells[1] + "\n";
    }
    return out;
  }

  template <class Fn>
  void run_guarded(RunContext& ctx, Fn&& fn) {
    try {
      ctx.run_on_ranks(case_ranks, fn);
    } catch (...) {
      release_states();
      throw;
    }
  }

  void release_states() {
    for (RankState& s : states_) s.release();
  }
};

// ---- reading the case ---------------------------------------------------------------------

// The mesh must build here (groups and sizes depend on it): a mesh the library rejects is a
// rejection of the case.
DeviceMesh read_mesh(CaseNode& node) {
  const MeshSpec spec = read_mesh_spec(node);
  check_runnable_mesh(node, spec);
  try {
    return spec.build();
  } catch (const meshgate::Error& err) {
    reject_value(node, "mesh", err.what());
  }
}

}  // namespace

const std::vector<std::string>& collective_case_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = mesh_spec_keys("mesh");
    for (std::string key : {"op", "group", "dtype", "reduce", "root", "seed", "bytes", "bytes.from",
                            "bytes.to", "bytes.factor", "inplace"})
      k.push_back(std::move(key));
    return k;
  }();
  return keys;
}

std::unique_ptr<PreparedCase> parse_collective_case(CaseNode& node, bool expect_error) {
  auto c = std::make_unique<CollectiveCase>();
  c->expect_error = expect_error;

  const std::string op = node.required<std::string>("op");
  c->op = find_collective(op);
  if (c->op == nullptr) {
    node.fail("op", "unknown op '" + op + "': expected " +
                        collective_names([](const CollectiveEntry&) { return true; }, " or "));
  }

  const DeviceMesh mesh = read_mesh(node);
  std::vector<std::string> group_dims;
  if (YAML::Node v = node.raw("group"); v && !v.IsNull()) {
    group_dims = read_dim_names(v, node, "group");
    if (group_dims.empty())
      node.fail_at(v, "group", "expected a dim name or a non-empty list of dim names");
  } else if (mesh.names().empty()) {
    if (mesh.ndim() != 1) node.fail("group", "is required for an unnamed mesh of several dims");
  } else {
    group_dims = mesh.names();
  }
  std::vector<std::vector<std::int64_t>> groups;
  try {
    if (group_dims.empty()) {
      groups = mesh.groups(std::int64_t{0});
    } else if (group_dims.size() == 1) {
      groups = mesh.groups(group_dims.front());
    } else {
      // Several dims: the groups of their flattened dim, as DeviceMesh._flatten makes it.
      groups = mesh.slice(group_dims).flatten().groups(std::int64_t{0});
    }
  } catch (const meshgate::Error& err) {
    reject_value(node, "group", err.what());
  }
  c->mesh = mesh;
  if (group_dims.empty()) c->dims = {0};
  for (const std::string& dim : group_dims) {
    const auto& names = mesh.names();
    c->dims.push_back(std::find(names.begin(), names.end(), dim) - names.begin());
  }
  std::int64_t highest = 0;
  for (const auto& group : groups) {
    std::vector<int> ranks;
    for (std::int64_t r : group) {
      ranks.push_back(static_cast<int>(r));
      highest = std::max(highest, r);
    }
    c->groups.push_back(std::move(ranks));
  }
  c->group_size = static_cast<int>(c->groups.front().size());
  c->case_ranks = case_world_size(node, highest);

  const std::string dtype = node.required<std::string>("dtype");
  try {
    c->dtype = comm::parse_dtype(dtype);
  } catch (const meshgate::Error& err) {
    reject_value(node, "dtype", err.what());
  }
  if (c->op->reduces) {
    const std::string reduce = node.required<std::string>("reduce");
    try {
      c->reduce = parse_reduce_op(reduce);
    } catch (const meshgate::Error& err) {
      reject_value(node, "reduce", err.what());
    }
    // No backend rounds an integer average, so such a case could never run: a rejection of
    // its input here, with file and line, rather than a kernel failure at run time.
    if (c->reduce == ReduceOp::avg && !comm::is_floating(c->dtype)) {
      reject_value(node, "reduce",
                   "avg of " + dtype +
                       " is supported by no backend (it would round): use a floating-point "
                       "dtype, or sum");
    }
    // An average is checked exactly with inputs that are multiples of the group size: the
    // smallest, the group size itself, must be exact in the dtype.
    if (c->reduce == ReduceOp::avg && avg_budget(c->dtype, c->group_size) < 1) {
      reject_value(node, "reduce",
                   "avg of " + dtype + " on groups of " + std::to_string(c->group_size) +
                       " ranks cannot be checked exactly: its inputs are multiples of the group "
                       "size, and " +
                       dtype + " holds integers exactly only up to " +
                       std::to_string(exact_limit(c->dtype)) +
                       "; use float32 or groups of at most that many ranks");
    }
  } else if (node.has("reduce")) {
    node.fail("reduce",
              "only " +
                  collective_names([](const CollectiveEntry& e) { return e.reduces; }, " and ") +
                  " reduce; remove it for " + op);
  }
  if (auto root = node.optional<int>("root")) {
    if (!c->op->has_root) {
      node.fail("root",
                "only " +
                    collective_names([](const CollectiveEntry& e) { return e.has_root; }, " and ") +
                    " has a root");
    }
    if (*root < 0 || *root >= c->group_size) {
      reject_value(node, "root",
                   "must be a rank of the group, 0 to " + std::to_string(c->group_size - 1) +
                       ", got " + std::to_string(*root));
    }
    c->root = *root;
  }
  if (auto seed = node.optional<std::int64_t>("seed")) c->seed = static_cast<std::uint64_t>(*seed);

  // Sizes: whole elements, and for the chunked ops whole equal chunks per rank. They have no cap
  // of their own: what a size may be is what the case's memory limit lets its buffers hold
  // (memory_estimate), so that a machine with the memory runs nccl-tests' sweeps to 8 GiB and
  // beyond.
  const std::int64_t es = static_cast<std::int64_t>(comm::element_size(c->dtype));
  const bool chunked = c->op->chunked;
  const std::int64_t unit = chunked ? es * c->group_size : es;
  const std::string unit_text = chunked
                                    ? std::to_string(c->group_size) + " equal chunks of whole " +
                                          dtype + " elements (" + std::to_string(unit) + " B)"
                                    : "whole " + dtype + " elements (" + std::to_string(es) + " B)";
  YAML::Node bytes = node.raw("bytes");
  if (!bytes || bytes.IsNull())
    node.fail("bytes", "is required: a size, a list or {from, to, factor}");
  if (bytes.IsMap()) {
    CaseNode sweep = node.child("bytes");
    if (!sweep.has("from") || !sweep.has("to")) node.fail("bytes", "a sweep needs from and to");
    const std::int64_t from = read_byte_size(sweep, sweep.raw("from"), "from", ZeroBytes::rejected);
    const std::int64_t to = read_byte_size(sweep, sweep.raw("to"), "to", ZeroBytes::rejected);
    const int factor = sweep.optional<int>("factor").value_or(2);
    if (factor < 2)
      reject_value(sweep, "factor", "must be at least 2, got " + std::to_string(factor));
    if (to < from) {
      reject_value(sweep, "to",
                   "must be at least from (" + std::to_string(from) + " B), got " +
                       std::to_string(to) + " B");
    }
    // As nccl-tests, a swept size is rounded down to what divides; those that round to 0 go.
    for (std::int64_t s = from; s <= to;) {
      const std::int64_t aligned = s - s % unit;
      if (aligned > 0 && (c->sizes.empty() || c->sizes.back() != aligned))
        c->sizes.push_back(aligned);
      if (s > to / factor) break;  // the next size is past `to` (and might overflow)
      s *= factor;
    }
    if (c->sizes.empty()) {
      reject_value(node, "bytes", "no size of the sweep holds " + unit_text);
    }
  } else {
    std::vector<YAML::Node> items;
    if (bytes.IsSequence()) {
      for (const auto& item : bytes) items.push_back(item);
    } else {
      items.push_back(bytes);
    }
    if (items.empty()) node.fail("bytes", "the list of sizes is empty");
    for (const YAML::Node& item : items) {
      const std::int64_t b = read_byte_size(node, item, "bytes", ZeroBytes::rejected);
      if (b % unit != 0) {
        reject_value_at(node, item, "bytes",
                        std::to_string(b) + " B does not divide into " + unit_text + " for " + op +
                            " on groups of " + std::to_string(c->group_size));
      }
      // A size listed twice would be run twice and shown once in the per-size table.
      if (std::find(c->sizes.begin(), c->sizes.end(), b) != c->sizes.end()) {
        node.fail_at(item, "bytes", "lists " + std::to_string(b) + " B twice");
      }
      c->sizes.push_back(b);
    }
  }

  if (YAML::Node v = node.raw("inplace"); v && !v.IsNull()) {
    c->inplace.clear();
    const auto read_flag = [&](const YAML::Node& item) {
      bool flag = false;
      if (!item.IsScalar() || !YAML::convert<bool>::decode(item, flag)) {
        node.fail_at(item, "inplace", "expected true, false or [false, true]");
      }
      if (std::find(c->inplace.begin(), c->inplace.end(), flag) != c->inplace.end()) {
        node.fail_at(item, "inplace", "lists the same setting twice");
      }
      c->inplace.push_back(flag);
    };
    if (v.IsSequence()) {
      for (const auto& item : v) read_flag(item);
      if (c->inplace.empty()) node.fail("inplace", "expected true, false or [false, true]");
    } else {
      read_flag(v);
    }
  }

  c->params_json = {{"op", op},
                    {"mesh", yaml_to_json(node.node()["mesh"])},
                    {"group", group_dims},
                    {"dtype", dtype},
                    {"bytes", c->sizes},
                    {"inplace", c->inplace},
                    {"group_size", c->group_size},
                    {"ranks", c->case_ranks}};
  if (c->reduce) c->params_json["reduce"] = std::string(to_string(*c->reduce));
  if (c->op->has_root) c->params_json["root"] = c->root;
  if (c->seed != 0) c->params_json["seed"] = c->seed;
  return c;
}

}  // namespace meshgate::runner

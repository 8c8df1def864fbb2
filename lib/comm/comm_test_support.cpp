#include "comm/comm_test_support.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/half_float.hpp"

namespace meshgate::comm::testing {
namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A byte pattern no expected value takes (127 exceeds every reachable result), written to
// outputs before the call so that an element the backend never writes is counted wrong.
constexpr unsigned char kPoison = 0x7F;

// The dtype's encoding of an exactly computed value (products and sums of small integers, or
// their average).
void encode(double value, DType dtype, void* out) {
  switch (dtype) {
    case DType::f32: {
      const float v = static_cast<float>(value);
      std::memcpy(out, &v, 4);
      return;
    }
    case DType::f64:
      std::memcpy(out, &value, 8);
      return;
    case DType::f16: {
      const std::uint16_t v = float_to_half(static_cast<float>(value));
      std::memcpy(out, &v, 2);
      return;
    }
    case DType::bf16: {
      const std::uint16_t v = float_to_bf16(static_cast<float>(value));
      std::memcpy(out, &v, 2);
      return;
    }
    // Integer results wrap like the backends' two's complement arithmetic.
    case DType::i32: {
      const auto v = static_cast<std::int32_t>(static_cast<std::int64_t>(value));
      std::memcpy(out, &v, 4);
      return;
    }
    case DType::i64: {
      const auto v = static_cast<std::int64_t>(value);
      std::memcpy(out, &v, 8);
      return;
    }
    case DType::i8: {
      const auto v = static_cast<std::int8_t>(static_cast<std::int64_t>(value));
      std::memcpy(out, &v, 1);
      return;
    }
    case DType::u8: {
      const auto v = static_cast<std::uint8_t>(static_cast<std::int64_t>(value));
      std::memcpy(out, &v, 1);
      return;
    }
  }
}

double combine(double a, double b, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return a + b;
    case ReduceOp::max:
      return std::max(a, b);
    case ReduceOp::min:
      return std::min(a, b);
    case ReduceOp::product:
      return a * b;
  }
  return a;
}

// The reduction over ranks 0..n-1 of element `index`, exact in double.
double expected_reduction(const CheckSpec& s, int n, std::size_t index) {
  double acc = static_cast<double>(input_value(s.seed, 0, index, s.dtype, s.reduce));
  for (int r = 1; r < n; ++r) {
    acc = combine(acc, static_cast<double>(input_value(s.seed, r, index, s.dtype, s.reduce)),
                  s.reduce);
  }
  return s.reduce == ReduceOp::avg ? acc / n : acc;
}

struct Buffer {
  Buffer(Communicator& c, std::size_t n) : comm(c), bytes(n), ptr(c.allocate(n)) {}
  ~Buffer() { comm.deallocate(ptr); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Communicator& comm;
  std::size_t bytes;
  void* ptr;
};

}  // namespace

std::string_view to_string(Collective c) {
  switch (c) {
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::all_gather:
      return "all_gather";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_to_all:
      return "all_to_all";
    case Collective::broadcast:
      return "broadcast";
  }
  return "unknown";
}

bool is_reduction(Collective c) {
  return c == Collective::all_reduce || c == Collective::reduce_scatter;
}

std::string describe(const CheckSpec& s) {
  std::string text(to_string(s.collective));
  if (is_reduction(s.collective)) text.append("(").append(to_string(s.reduce)).append(")");
  text.append(" ").append(to_string(s.dtype));
  text.append(" count=").append(std::to_string(s.count));
  text.append(s.in_place ? " in-place" : " out-of-place");
  text.append(" seed=").append(std::to_string(s.seed));
  if (s.collective == Collective::broadcast) text.append(" root=").append(std::to_string(s.root));
  return text;
}

std::int64_t input_value(std::uint64_t seed, int rank, std::size_t index, DType dtype,
                         ReduceOp reduce) {
  const std::uint64_t h = mix(seed * 0xD1B54A32D192ED03ull +
                              static_cast<std::uint64_t>(rank) * 0x8CB92BA72F3D8DD7ull + index);
  if (reduce == ReduceOp::product) {
    if (dtype == DType::u8) return 1 + static_cast<std::int64_t>(h % 2);  // {1, 2}
    static constexpr std::int64_t kFactors[] = {-2, -1, 1, 2};
    return kFactors[h % 4];
  }
  if (dtype == DType::u8) return static_cast<std::int64_t>(h % 16);  // [0, 15]
  return static_cast<std::int64_t>(h % 31) - 15;                     // [-15, 15]
}

std::size_t run_and_count_wrong(Communicator& comm, const CheckSpec& s, std::string* first_wrong) {
  const int n = comm.size();
  const int rank = comm.rank();
  const std::size_t es = element_size(s.dtype);
  const std::size_t count = s.count;
  const auto un = static_cast<std::size_t>(n);

  // Element counts of the input and output as the interface defines them.
  std::size_t in_count = count;
  std::size_t out_count = count;
  switch (s.collective) {
    case Collective::all_reduce:
    case Collective::broadcast:
      break;
    case Collective::all_gather:
      out_count = un * count;
      break;
    case Collective::reduce_scatter:
      in_count = un * count;
      break;
    case Collective::all_to_all:
      in_count = un * count;
      out_count = un * count;
      break;
  }

  std::vector<unsigned char> input(in_count * es);
  const std::uint64_t input_seed =
      s.collective == Collective::broadcast && rank != s.root ? s.seed + 1 : s.seed;
  for (std::size_t i = 0; i < in_count; ++i) {
    encode(static_cast<double>(input_value(input_seed, rank, i, s.dtype, s.reduce)), s.dtype,
           &input[i * es]);
  }
  std::vector<unsigned char> expected(out_count * es);
  for (std::size_t i = 0; i < out_count; ++i) {
    double value = 0;
    switch (s.collective) {
      case Collective::all_reduce:
        value = expected_reduction(s, n, i);
        break;
      case Collective::reduce_scatter:
        value = expected_reduction(s, n, static_cast<std::size_t>(rank) * count + i);
        break;
      case Collective::all_gather:
        value = static_cast<double>(
            input_value(s.seed, static_cast<int>(i / count), i % count, s.dtype, s.reduce));
        break;
      case Collective::all_to_all:
        value = static_cast<double>(input_value(s.seed, static_cast<int>(i / count),
                                                static_cast<std::size_t>(rank) * count + i % count,
                                                s.dtype, s.reduce));
        break;
      case Collective::broadcast:
        value = static_cast<double>(input_value(s.seed, s.root, i, s.dtype, s.reduce));
        break;
    }
    encode(value, s.dtype, &expected[i * es]);
  }

  // One device buffer holds both input and output in place (NCCL's offsets); out of place
  // the output is a second, poisoned buffer. A broadcast's non-root ranks hold inputs of their
  // own (another seed), which must neither reach any output nor be overwritten.
  const bool separate = !s.in_place;
  const std::size_t main_bytes = std::max(in_count, out_count) * es;
  Buffer main(comm, main_bytes);
  Buffer other(comm, separate ? out_count * es : 0);
  std::vector<unsigned char> poison(main_bytes, kPoison);
  comm.copy_from_host(main.ptr, poison.data(), main_bytes);
  if (separate) comm.copy_from_host(other.ptr, poison.data(), out_count * es);

  auto* base = static_cast<unsigned char*>(main.ptr);
  void* send = base;
  void* recv = separate ? other.ptr : main.ptr;
  if (s.in_place && s.collective == Collective::all_gather) {
    send = base + static_cast<std::size_t>(rank) * count * es;
  }
  if (s.in_place && s.collective == Collective::reduce_scatter) {
    recv = base + static_cast<std::size_t>(rank) * count * es;
  }
  comm.copy_from_host(send, input.data(), in_count * es);

  switch (s.collective) {
    case Collective::all_reduce:
      comm.all_reduce(send, recv, count, s.dtype, s.reduce);
      break;
    case Collective::all_gather:
      comm.all_gather(send, recv, count, s.dtype);
      break;
    case Collective::reduce_scatter:
      comm.reduce_scatter(send, recv, count, s.dtype, s.reduce);
      break;
    case Collective::all_to_all:
      comm.all_to_all(send, recv, count, s.dtype);
      break;
    case Collective::broadcast:
      comm.broadcast(send, recv, count, s.dtype, s.root);
      break;
  }
  comm.synchronize();

  std::vector<unsigned char> actual(out_count * es);
  comm.copy_to_host(actual.data(), recv, out_count * es);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < out_count; ++i) {
    if (std::memcmp(&actual[i * es], &expected[i * es], es) == 0) continue;
    if (wrong++ == 0 && first_wrong != nullptr) {
      // Bytes in memory order, so that the poison and a partial write are recognisable.
      const auto hex = [&](const std::vector<unsigned char>& bytes) {
        static constexpr char kDigits[] = "0123456789abcdef";
        std::string text;
        for (std::size_t b = 0; b < es; ++b) {
          text += kDigits[bytes[i * es + b] >> 4];
          text += kDigits[bytes[i * es + b] & 15];
        }
        return text;
      };
      *first_wrong = "element " + std::to_string(i) + " of " + std::to_string(out_count) +
                     ": expected bytes " + hex(expected) + ", got " + hex(actual);
    }
  }
  // Out of place, the send buffer is read only: an element the call changed counts as wrong.
  if (separate) {
    std::vector<unsigned char> sent(in_count * es);
    comm.copy_to_host(sent.data(), send, in_count * es);
    for (std::size_t i = 0; i < in_count; ++i) {
      if (std::memcmp(&sent[i * es], &input[i * es], es) == 0) continue;
      if (wrong++ == 0 && first_wrong != nullptr) {
        *first_wrong = "send element " + std::to_string(i) + " of " + std::to_string(in_count) +
                       " changed by an out-of-place call";
      }
    }
  }
  return wrong;
}

}  // namespace meshgate::comm::testing

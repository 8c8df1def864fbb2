#include "gemm/sweep.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "core/error.hpp"
#include "gemm/numeric.hpp"
#include "gemm/reference.hpp"

namespace meshgate::gemm {
namespace {

// splitmix64: a stateless, well-mixed hash, so that draw i needs no draws before it.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t hash(std::uint64_t seed, std::int64_t index, std::uint64_t field) {
  return mix(mix(mix(seed) ^ static_cast<std::uint64_t>(index)) ^ field);
}

// Uniform in [0, 1) from the top 53 bits.
double unit(std::uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

std::int64_t uniform_in(const SizeRange& r, std::uint64_t h) {
  const auto span = static_cast<std::uint64_t>(r.hi - r.lo) + 1;
  return r.lo + static_cast<std::int64_t>(h % span);  // span is tiny next to 2^64: bias ~0
}

std::int64_t log_uniform_in(const SizeRange& r, std::uint64_t h) {
  const double lo = std::log(static_cast<double>(r.lo));
  const double hi = std::log(static_cast<double>(r.hi) + 1.0);
  const auto v = static_cast<std::int64_t>(std::floor(std::exp(lo + unit(h) * (hi - lo))));
  return std::clamp(v, r.lo, r.hi);
}

// Fields of draw_shape's hashes; draw_choice callers use their own, from 16 on.
enum : std::uint64_t { kFieldM = 1, kFieldN = 2, kFieldK = 3 };

constexpr double kHead = 16;          // a_0: keeps every pre-activation value >= 16
constexpr double kBiasLargest = 8;    // bias[j] in 1..8
}  // namespace

std::string_view to_string(ShapeMode m) { return m == ShapeMode::uniform ? "uniform" : "extreme"; }

ShapeMode parse_shape_mode(std::string_view s) {
  if (s == "uniform") return ShapeMode::uniform;
  if (s == "extreme") return ShapeMode::extreme;
  throw Error(ErrorKind::value, "unknown sweep mode '" + std::string(s) + "': uniform or extreme");
}

SweepShape draw_shape(const ShapeSpace& space, std::uint64_t seed, std::int64_t index) {
  SweepShape s;
  s.m = uniform_in(space.m, hash(seed, index, kFieldM));
  s.n = uniform_in(space.n, hash(seed, index, kFieldN));
  const std::uint64_t hk = hash(seed, index, kFieldK);
  s.k = space.mode == ShapeMode::uniform ? uniform_in(space.k, hk) : log_uniform_in(space.k, hk);
  return s;
}

std::size_t draw_choice(std::size_t choices, std::uint64_t seed, std::int64_t index,
                        std::uint64_t field) {
  return choices <= 1 ? 0 : static_cast<std::size_t>(hash(seed, index, field) % choices);
}

std::int64_t exact_integer_limit(DType d) {
  if (d == DType::f16) return 1LL << 11;
  if (d == DType::bf16) return 1LL << 8;
  return 1LL << 24;
}

std::string_view to_string(FailureClass c) {
  switch (c) {
    case FailureClass::k_tail: return "k_tail";
    case FailureClass::bias_missing: return "bias_missing";
    case FailureClass::bias_doubled: return "bias_doubled";
    case FailureClass::unwritten: return "unwritten";
    case FailureClass::misplaced: return "misplaced";
    case FailureClass::drift: return "drift";
    case FailureClass::fallback: return "fallback";
  }
  return "?";
}

ExactPattern exact_pattern(const GemmProblem& p) {
  ExactPattern e;
  // Room above the largest sum for the largest row offset and a doubled bias: every value a
  // wrong output of the classes above can hold stays exact too.
  const auto budget = exact_integer_limit(p.dtype) - static_cast<std::int64_t>(kHead + 1) -
                      (kRowOffsets - 1) - 2 * static_cast<std::int64_t>(kBiasLargest);
  if (p.k > 0) {
    e.climb = std::min<std::int64_t>(p.k - 1, budget);
    const std::int64_t plateau = p.k - 1 - e.climb;
    e.sum = kHead + static_cast<double>(plateau % 2) + static_cast<double>(e.climb);
  }
  e.bias.resize(static_cast<std::size_t>(p.n));
  for (std::int64_t j = 0; j < p.n; ++j)
    e.bias[static_cast<std::size_t>(j)] = has_bias(p.epilogue) ? 1.0 + double((5 * j) % 8) : 0.0;
  return e;
}

namespace {

// Stores in a HostTensor by the element's bits, so that filling millions of elements costs a
// copy, not a rounding each (the values are few: 16 + r, +1, -1, and the bias).
class BitFiller {
 public:
  explicit BitFiller(HostTensor& t) : t_(t), size_(element_size(t.dtype())) {}
  // The bits of `value` in the tensor's dtype.
  std::uint32_t bits(float value) const {
    HostTensor one(t_.dtype(), 1);
    one.set(0, value);
    std::uint32_t b = 0;
    std::memcpy(&b, one.data(), size_);
    return b;
  }
  void put(std::int64_t at, std::uint32_t b) {
    std::memcpy(static_cast<std::byte*>(t_.data()) + at * static_cast<std::int64_t>(size_), &b,
                size_);
  }
  // The elements of `from` (a tensor of the same dtype), from `at` on.
  void copy(std::int64_t at, const HostTensor& from) {
    std::memcpy(static_cast<std::byte*>(t_.data()) + at * static_cast<std::int64_t>(size_),
                from.data(), from.bytes());
  }
  // `count` elements from `at` on, every one `b`.
  void run(std::int64_t at, std::int64_t count, std::uint32_t b) {
    if (size_ == 2) {
      auto* d = static_cast<std::uint16_t*>(t_.data()) + at;
      std::fill(d, d + count, static_cast<std::uint16_t>(b));
    } else {
      auto* d = static_cast<std::uint32_t*>(t_.data()) + at;
      std::fill(d, d + count, b);
    }
  }

 private:
  HostTensor& t_;
  std::size_t size_;
};

}  // namespace

GemmInputs make_exact_inputs(const GemmProblem& p, const ExactPattern& e) {
  validate(p);
  GemmInputs in{HostTensor(p.dtype, x_elements(p)), HostTensor(p.dtype, w_elements(p)),
                HostTensor(p.dtype, p.bias_offset + p.n)};
  const std::int64_t plateau_end = p.k - e.climb;  // terms 1 .. plateau_end-1 alternate
  BitFiller x(in.x), w(in.w);
  const std::uint32_t plus = x.bits(1.0f), minus = x.bits(-1.0f);
  std::vector<std::uint32_t> a(static_cast<std::size_t>(p.k));  // a_k for k >= 1; a_0 per row
  for (std::int64_t kk = 1; kk < p.k; ++kk)
    a[static_cast<std::size_t>(kk)] = kk < plateau_end && kk % 2 == 0 ? minus : plus;
  std::vector<std::uint32_t> head(static_cast<std::size_t>(std::min(p.m, kRowOffsets)));
  for (std::size_t r = 0; r < head.size(); ++r) {
    const double offset = ExactPattern::row_offset(static_cast<std::int64_t>(r));
    head[r] = x.bits(static_cast<float>(kHead + offset));
  }
  const auto head_of = [&](std::int64_t i) {
    return head[static_cast<std::size_t>(i % kRowOffsets)];
  };
  for (std::int64_t b = 0; b < p.batch; ++b) {
    if (p.k > 0) {
      // X: a row of K terms per i (or, transposed, M equal terms per kk), then row i's head.
      if (x_transposed(p)) {
        for (std::int64_t kk = 1; kk < p.k; ++kk)
          x.run(x_index(p, 0, kk, b), p.m, a[static_cast<std::size_t>(kk)]);
      } else {
        HostTensor row(p.dtype, p.k);
        BitFiller r(row);
        for (std::int64_t kk = 1; kk < p.k; ++kk) r.put(kk, a[static_cast<std::size_t>(kk)]);
        for (std::int64_t i = 0; i < p.m; ++i) x.copy(x_index(p, i, 0, b), row);
      }
      for (std::int64_t i = 0; i < p.m; ++i) x.put(x_index(p, i, 0, b), head_of(i));
    }
    // W: all ones over its logical elements; the padding of a leading dimension stays 0.
    if (w_transposed(p)) {
      for (std::int64_t j = 0; j < p.n; ++j) w.run(w_index(p, 0, j, b), p.k, plus);
    } else {
      for (std::int64_t kk = 0; kk < p.k; ++kk) w.run(w_index(p, kk, 0, b), p.n, plus);
    }
  }
  for (std::int64_t j = 0; j < p.n; ++j)
    in.bias.set(p.bias_offset + j, static_cast<float>(e.bias[static_cast<std::size_t>(j)]));
  return in;
}

namespace {

// alpha (sum + r_i) + bias[j] - shift: element (i, j) before the activation.
double pre_activation(const GemmProblem& p, const ExactPattern& e, std::int64_t i,
                      std::size_t j, double shift = 0) {
  return static_cast<double>(p.alpha) * (e.sum + ExactPattern::row_offset(i)) + e.bias[j] - shift;
}

// Element (i, j) of the exact output as the output dtype holds it.
double exact_value(const GemmProblem& p, const ExactPattern& e, std::int64_t i, std::size_t j) {
  return round_to(p.dtype, activate(p.epilogue, pre_activation(p, e, i, j)));
}

}  // namespace

std::vector<double> exact_output(const GemmProblem& p, const ExactPattern& e) {
  std::vector<double> out(static_cast<std::size_t>(p.m * p.n));
  for (std::int64_t i = 0; i < p.m; ++i)
    for (std::int64_t j = 0; j < p.n; ++j)
      out[static_cast<std::size_t>(i * p.n + j)] =
          activate(p.epilogue, pre_activation(p, e, i, static_cast<std::size_t>(j)));
  return out;
}

namespace {

// Whether every element (row i of its batch, column j) satisfies `matches(i, j, value)`.
template <class Match>
bool every_element(const GemmProblem& p, const HostTensor& y, Match&& matches) {
  for (std::int64_t row = 0; row < total_rows(p); ++row)
    for (std::int64_t j = 0; j < p.n; ++j)
      if (!matches(row % p.m, static_cast<std::size_t>(j),
                   static_cast<double>(y.get(y_index(p, row, j)))))
        return false;
  return true;
}

std::string first_wrong(const GemmProblem& p, const std::vector<double>& expected,
                        const HostTensor& y) {
  for (std::int64_t row = 0; row < total_rows(p); ++row)
    for (std::int64_t j = 0; j < p.n; ++j) {
      const auto at = static_cast<std::size_t>((row % p.m) * p.n + j);
      const double want = round_to(p.dtype, expected[at]);
      const double got = y.get(y_index(p, row, j));
      if (got != want) {
        std::ostringstream s;
        s << "Y[" << row << "," << j << "] = " << got << ", expected " << want;
        return s.str();
      }
    }
  return "";
}

}  // namespace

namespace {

// Whether `y` is bitwise the exact output: rows with the same offset r_i hold the same values,
// so a table of min(M, 7) rows of the expected bits is compared row by row. Every exact value
// is >= 16 (no signed zeros, no NaN), so bitwise equality is equality.
bool bitwise_exact(const GemmProblem& p, const ExactPattern& e, const HostTensor& y) {
  const std::int64_t offsets = std::min(p.m, kRowOffsets);
  HostTensor table(p.dtype, offsets * p.n);
  for (std::int64_t r = 0; r < offsets; ++r)
    for (std::int64_t j = 0; j < p.n; ++j)
      table.set(r * p.n + j, static_cast<float>(exact_value(p, e, r, static_cast<std::size_t>(j))));
  const std::size_t row_bytes = static_cast<std::size_t>(p.n) * element_size(p.dtype);
  const auto* got = static_cast<const std::byte*>(y.data());
  const auto* want = static_cast<const std::byte*>(table.data());
  for (std::int64_t row = 0; row < total_rows(p); ++row) {
    const std::int64_t r = row % p.m % kRowOffsets;
    if (std::memcmp(got + y_index(p, row, 0) * static_cast<std::int64_t>(element_size(p.dtype)),
                    want + static_cast<std::size_t>(r) * row_bytes, row_bytes) != 0)
      return false;
  }
  return true;
}

}  // namespace

OutputVerdict classify_output(const GemmProblem& p, const ExactPattern& e, const HostTensor& y) {
  validate_output(p, y);
  OutputVerdict v;
  if (p.n == 0 || bitwise_exact(p, e, y)) return v;  // the common case, without the fp64 pass
  const std::vector<double> expected = exact_output(p, e);
  const auto expected_at = [&](std::int64_t i, std::size_t j) {
    return expected[static_cast<std::size_t>(i * p.n) + j];
  };
  std::int64_t nonfinite = 0;
  for (std::int64_t row = 0; row < total_rows(p); ++row)
    for (std::int64_t j = 0; j < p.n; ++j) {
      const double got = y.get(y_index(p, row, j));
      nonfinite += !std::isfinite(got);
      v.bad += got != round_to(p.dtype, expected_at(row % p.m, static_cast<std::size_t>(j)));
    }
  if (v.bad == 0) return v;
  v.detail = first_wrong(p, expected, y);
  v.ok = false;
  if (nonfinite > 0) {
    v.failure = FailureClass::unwritten;
    return v;
  }
  // An output shifted by a whole number before the activation: the shift shows through ReLU
  // and the bias unchanged, and through the tanh GELU wherever the value stays >= 16 (GELU is
  // the identity there); the GELU of a smaller value is compared within the dtype's tolerance,
  // since an implementation evaluates it in float.
  const Tolerance tol = tolerance_for(p.dtype, p.k);
  const auto holds = [&](double got, double pre) {
    const double want = round_to(p.dtype, activate(p.epilogue, pre));
    if (p.epilogue != Epilogue::gelu_bias) return got == want;
    return std::fabs(got - want) <= tol.atol + tol.rtol * std::fabs(want);
  };
  const auto shifted_by = [&](auto shift) {
    return every_element(p, y, [&](std::int64_t i, std::size_t j, double got) {
      return holds(got, pre_activation(p, e, i, j, shift(j)));
    });
  };
  const double offset = pre_activation(p, e, 0, 0) - static_cast<double>(y.get(y_index(p, 0, 0)));
  if (offset != 0 && offset == std::floor(offset) &&
      shifted_by([&](std::size_t) { return offset; })) {
    v.failure = FailureClass::k_tail;
    v.offset = offset;
    return v;
  }
  if (has_bias(p.epilogue)) {
    if (shifted_by([&](std::size_t j) { return e.bias[j]; })) {
      v.failure = FailureClass::bias_missing;
      return v;
    }
    if (shifted_by([&](std::size_t j) { return -e.bias[j]; })) {
      v.failure = FailureClass::bias_doubled;
      return v;
    }
  }
  // Every element holds exactly the value of some row of its column (rows of M differ by their
  // offset r_i; every value is >= 16, where even GELU is exact): a result stored in the wrong
  // row, or one row's result in every row.
  const std::int64_t offsets = std::min(p.m, kRowOffsets);
  const bool rows_astray =
      offsets > 1 && every_element(p, y, [&](std::int64_t, std::size_t j, double got) {
        for (std::int64_t r = 0; r < offsets; ++r)
          if (got == exact_value(p, e, r, j)) return true;
        return false;
      });
  if (rows_astray) {
    v.failure = FailureClass::misplaced;
    return v;
  }
  const bool within = every_element(p, y, [&](std::int64_t i, std::size_t j, double got) {
    const double want = expected_at(i, j);
    return std::fabs(got - want) <= tol.atol + tol.rtol * std::fabs(want);
  });
  v.failure = FailureClass::drift;
  v.ok = within;  // off in no pattern, and inside the dtype's tolerance: tolerated
  return v;
}

}  // namespace meshgate::gemm

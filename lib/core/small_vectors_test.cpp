// SmallVector and InlineVector: values inline up to N, then on the heap, through every way a
// value gets in, out or across (copies and moves inline and on the heap, growth that reads its
// own values, erase), with each value's constructions and destructions counted.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/inline_vector.hpp"
#include "core/small_vector.hpp"

namespace meshgate {
namespace {

using Ints = std::vector<std::int64_t>;

template <std::size_t N>
Ints as_vector(const SmallVector<std::int64_t, N>& v) {
  return v.to_vector();
}

TEST(SmallVector, InlineThenHeapKeepsEveryValue) {
  SmallVector<std::int64_t, 3> v;
  for (std::int64_t i = 0; i < 10; ++i) v.push_back(i * i);
  EXPECT_EQ(v.size(), 10u);
  EXPECT_EQ(as_vector(v), (Ints{0, 1, 4, 9, 16, 25, 36, 49, 64, 81}));
  EXPECT_EQ(v.front(), 0);
  EXPECT_EQ(v.back(), 81);
}

TEST(SmallVector, CopiesAndMovesInlineAndOnTheHeap) {
  const SmallVector<std::int64_t, 4> small{1, 2, 3};
  const SmallVector<std::int64_t, 4> large{1, 2, 3, 4, 5, 6};
  for (const auto* source : {&small, &large}) {
    SmallVector<std::int64_t, 4> copy = *source;
    EXPECT_EQ(copy, *source);
    SmallVector<std::int64_t, 4> assigned{9};
    assigned = *source;
    EXPECT_EQ(assigned, *source);
    SmallVector<std::int64_t, 4> heap_target{9, 9, 9, 9, 9, 9, 9};
    heap_target = *source;  // a heap block that is kept and refilled
    EXPECT_EQ(heap_target, *source);
    SmallVector<std::int64_t, 4> moved = std::move(copy);
    EXPECT_EQ(moved, *source);
    EXPECT_TRUE(copy.empty());
    assigned = std::move(moved);
    EXPECT_EQ(assigned, *source);
    // The copies are independent of their source.
    assigned[0] = 42;
    EXPECT_EQ((*source)[0], 1);
  }
}

TEST(SmallVector, AssignAppendAndCompareWithStdVector) {
  SmallVector<std::int64_t, 2> v;
  const Ints five = {5, 4, 3, 2, 1};
  v.assign(five);
  EXPECT_EQ(v, five);
  v = {7, 8};
  EXPECT_EQ(v, (Ints{7, 8}));
  EXPECT_FALSE(v == five);
  v.append(five.data(), five.size());
  EXPECT_EQ(v, (Ints{7, 8, 5, 4, 3, 2, 1}));
  const SmallVector<std::int64_t, 2> from_span{std::span<const std::int64_t>(five)};
  EXPECT_EQ(from_span, five);
  const SmallVector<std::int64_t, 2> from_iterators(five.begin() + 1, five.end());
  EXPECT_EQ(from_iterators, (Ints{4, 3, 2, 1}));
  const std::span<const std::int64_t> view = from_iterators;
  EXPECT_EQ(view.size(), 4u);
}

// No default constructor: InlineVector constructs each value where it goes.
struct NoDefault {
  explicit NoDefault(int v) : value(v) {}
  int value;
  friend bool operator==(const NoDefault&, const NoDefault&) = default;
};

TEST(InlineVector, HoldsValuesWithoutADefaultConstructor) {
  InlineVector<NoDefault, 2> v;
  for (int i = 0; i < 5; ++i) v.push_back(NoDefault(i));
  ASSERT_EQ(v.size(), 5u);
  EXPECT_EQ(v[4], NoDefault(4));
  const InlineVector<NoDefault, 2> copy = v;
  EXPECT_EQ(copy, v);
}

// Counts live values, so that every construction is matched by one destruction.
struct Counted {
  static inline int live = 0;
  std::string text;  // not trivially copyable
  explicit Counted(std::string t = "") : text(std::move(t)) { ++live; }
  Counted(const Counted& o) : text(o.text) { ++live; }
  Counted(Counted&& o) noexcept : text(std::move(o.text)) { ++live; }
  Counted& operator=(const Counted&) = default;
  Counted& operator=(Counted&&) noexcept = default;
  ~Counted() { --live; }
  friend bool operator==(const Counted& a, const Counted& b) { return a.text == b.text; }
};

using Texts = std::vector<std::string>;

// prefix followed by i, built by append (GCC 12 warns wrongly on operator+ with to_string).
std::string label(std::string prefix, int i) {
  return prefix.append(std::to_string(i));
}

template <std::size_t N>
Texts texts(const InlineVector<Counted, N>& v) {
  Texts out;
  for (const Counted& c : v) out.push_back(c.text);
  return out;
}

TEST(InlineVector, InlineThenHeapWithEveryValueDestroyedOnce) {
  {
    InlineVector<Counted, 2> v;
    for (int i = 0; i < 9; ++i) v.emplace_back(label("value number ", i));
    EXPECT_EQ(v.size(), 9u);
    EXPECT_EQ(Counted::live, 9);
    EXPECT_EQ(v.front().text, "value number 0");
    EXPECT_EQ(v.back().text, "value number 8");
    v.pop_back();
    EXPECT_EQ(Counted::live, 8);
  }
  EXPECT_EQ(Counted::live, 0);
}

TEST(InlineVector, CopiesAndMovesInlineAndOnTheHeap) {
  {
    InlineVector<Counted, 3> small;
    InlineVector<Counted, 3> large;
    for (int i = 0; i < 2; ++i) small.emplace_back(label("s", i));
    for (int i = 0; i < 5; ++i) large.emplace_back(label("l", i));
    for (auto* source : {&small, &large}) {
      const Texts expected = texts(*source);
      InlineVector<Counted, 3> copy = *source;
      EXPECT_EQ(texts(copy), expected);
      InlineVector<Counted, 3> assigned;
      assigned.emplace_back("old");
      assigned = *source;
      EXPECT_EQ(texts(assigned), expected);
      InlineVector<Counted, 3> moved = std::move(copy);
      EXPECT_EQ(texts(moved), expected);
      EXPECT_TRUE(copy.empty());
      InlineVector<Counted, 3> target;
      for (int i = 0; i < 6; ++i) target.emplace_back("t");  // on the heap before the move
      target = std::move(moved);
      EXPECT_EQ(texts(target), expected);
      EXPECT_TRUE(moved.empty());
      EXPECT_EQ(target, *source);
    }
  }
  EXPECT_EQ(Counted::live, 0);
}

TEST(InlineVector, GrowthMayReadItsOwnValues) {
  {
    InlineVector<Counted, 2> v;
    v.emplace_back("first");
    v.emplace_back("second");
    v.push_back(v.front());  // grows to the heap while copying one of its inline values
    v.push_back(v.back());
    EXPECT_EQ(texts(v), (Texts{"first", "second", "first", "first"}));
  }
  EXPECT_EQ(Counted::live, 0);
}

TEST(InlineVector, EraseAppendAndConversions) {
  {
    InlineVector<Counted, 2> v;
    for (const char* t : {"a", "b", "c", "d"}) v.emplace_back(t);
    const Counted* after = v.erase(v.begin() + 1);
    EXPECT_EQ(after->text, "c");
    EXPECT_EQ(texts(v), (Texts{"a", "c", "d"}));
    v.erase(v.end() - 1);
    EXPECT_EQ(texts(v), (Texts{"a", "c"}));
    const std::vector<Counted> more = {Counted("x"), Counted("y")};
    v.append(more.begin(), more.end());
    EXPECT_EQ(texts(v), (Texts{"a", "c", "x", "y"}));
    std::vector<Counted> owned = {Counted("p"), Counted("q"), Counted("r")};
    const InlineVector<Counted, 2> taken(std::move(owned));
    EXPECT_EQ(texts(taken), (Texts{"p", "q", "r"}));
    const std::span<const Counted> view = taken;
    EXPECT_EQ(view.size(), 3u);
    v.clear();
    EXPECT_TRUE(v.empty());
  }
  EXPECT_EQ(Counted::live, 0);
}

}  // namespace
}  // namespace meshgate

#pragma once
// InlineVector: a vector that keeps up to N values inline and moves them to one heap block past
// N, for values with constructors to run (a plan's steps); SmallVector is the memcpy-only form
// for trivially copyable values. Iterators are pointers; they are invalidated by any growth,
// and, unlike std::vector's, by a move of the vector while its values are inline.
#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace meshgate {

template <class T, std::size_t N>
class InlineVector {
  static_assert(N > 0, "an InlineVector keeps at least one value inline");
  static_assert(std::is_nothrow_move_constructible_v<T>, "growth moves the values");
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "heap blocks use operator new");

 public:
  using value_type = T;
  using size_type = std::size_t;
  using reference = T&;
  using const_reference = const T&;
  using iterator = T*;
  using const_iterator = const T*;

  InlineVector() noexcept {}
  InlineVector(std::initializer_list<T> values) : InlineVector(values.begin(), values.end()) {}
  template <std::input_iterator It>
  InlineVector(It first, It last) {
    for (; first != last; ++first) emplace_back(*first);
  }
  // Moves the values of a std::vector in.
  explicit InlineVector(std::vector<T>&& values) {
    reserve(values.size());
    for (T& v : values) emplace_back(std::move(v));
  }
  InlineVector(const InlineVector& other) : InlineVector(other.begin(), other.end()) {}
  InlineVector(InlineVector&& other) noexcept { take(other); }
  InlineVector& operator=(const InlineVector& other) {
    if (this != &other) {
      clear();
      reserve(other.size_);
      for (const T& v : other) emplace_back(v);
    }
    return *this;
  }
  InlineVector& operator=(InlineVector&& other) noexcept {
    if (this != &other) {
      clear();
      release();
      take(other);
    }
    return *this;
  }
  ~InlineVector() {
    clear();
    release();
  }

  T* data() noexcept { return heap_ ? heap_ : std::launder(reinterpret_cast<T*>(inline_)); }
  const T* data() const noexcept {
    return heap_ ? heap_ : std::launder(reinterpret_cast<const T*>(inline_));
  }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + size_; }
  const T* begin() const noexcept { return data(); }
  const T* end() const noexcept { return data() + size_; }
  T& operator[](std::size_t i) noexcept { return data()[i]; }
  const T& operator[](std::size_t i) const noexcept { return data()[i]; }
  T& front() noexcept { return data()[0]; }
  const T& front() const noexcept { return data()[0]; }
  T& back() noexcept { return data()[size_ - 1]; }
  const T& back() const noexcept { return data()[size_ - 1]; }

  void reserve(std::size_t capacity) {
    if (capacity > capacity_) grow(capacity);
  }
  // Value-initializes the new value (T() for a class with a user-provided constructor).
  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == capacity_) return grow_and_emplace(std::forward<Args>(args)...);
    T* slot = ::new (data() + size_) T(std::forward<Args>(args)...);
    ++size_;
    return *slot;
  }
  void push_back(const T& value) { emplace_back(value); }
  template <std::input_iterator It>
  void append(It first, It last) {
    for (; first != last; ++first) emplace_back(*first);
  }
  void push_back(T&& value) { emplace_back(std::move(value)); }
  void pop_back() noexcept { std::destroy_at(data() + --size_); }
  // Removes the value at `pos`, moving the ones after it down.
  T* erase(const T* pos) {
    T* at = begin() + (pos - begin());
    std::move(at + 1, end(), at);
    pop_back();
    return at;
  }
  void clear() noexcept {
    std::destroy(begin(), end());
    size_ = 0;
  }

  friend bool operator==(const InlineVector& a, const InlineVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  // The new value is built before the old ones move, so `args` may refer to one of them.
  template <class... Args>
  T& grow_and_emplace(Args&&... args) {
    const std::size_t capacity = capacity_ * 2;
    T* bigger = static_cast<T*>(::operator new(capacity * sizeof(T)));
    try {
      ::new (bigger + size_) T(std::forward<Args>(args)...);
    } catch (...) {
      ::operator delete(bigger);
      throw;
    }
    std::uninitialized_move(begin(), end(), bigger);
    std::destroy(begin(), end());
    release();
    heap_ = bigger;
    capacity_ = capacity;
    return heap_[size_++];
  }
  void grow(std::size_t capacity) {
    T* bigger = static_cast<T*>(::operator new(capacity * sizeof(T)));
    std::uninitialized_move(begin(), end(), bigger);
    std::destroy(begin(), end());
    release();
    heap_ = bigger;
    capacity_ = capacity;
  }
  void release() noexcept {
    if (heap_) ::operator delete(heap_);
    heap_ = nullptr;
    capacity_ = N;
  }
  // Takes other's values (its block, or moves its inline values) and leaves it empty.
  void take(InlineVector& other) noexcept {
    if (other.heap_) {
      heap_ = std::exchange(other.heap_, nullptr);
      capacity_ = std::exchange(other.capacity_, N);
      size_ = std::exchange(other.size_, 0);
      return;
    }
    std::uninitialized_move(other.begin(), other.end(), data());
    size_ = other.size_;
    other.clear();
  }

  T* heap_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = N;
  alignas(T) unsigned char inline_[N * sizeof(T)];
};

}  // namespace meshgate

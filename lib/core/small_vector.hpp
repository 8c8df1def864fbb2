#pragma once
// SmallVector: a vector of trivially copyable, default-constructible values that keeps up to N
// of them inline, so the layouts of a few modes that the algebra builds and copies, and the
// shapes and dims of a plan's steps, never touch the heap. Past N it moves its values to one
// heap block. Value-initializing one (`SmallVector v{}`) zeroes its inline buffer: on a hot path,
// default-initialize it instead.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace meshgate {

template <class T, std::size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVector copies its elements with memcpy");

 public:
  using value_type = T;
  using size_type = std::size_t;
  using reference = T&;
  using const_reference = const T&;
  using iterator = T*;
  using const_iterator = const T*;

  SmallVector() noexcept = default;
  SmallVector(std::initializer_list<T> values) { append(values.begin(), values.size()); }
  explicit SmallVector(std::span<const T> values) { append(values.data(), values.size()); }
  template <std::input_iterator It>
  SmallVector(It first, It last) {
    for (; first != last; ++first) push_back(*first);
  }
  SmallVector(const SmallVector& other) {
    if (other.heap_) {
      append(other.data(), other.size_);
    } else {
      copy_inline(other);
      size_ = other.size_;
    }
  }
  SmallVector(SmallVector&& other) noexcept { steal(other); }
  SmallVector& operator=(const SmallVector& other) {
    if (this == &other) return *this;
    if (!heap_ && !other.heap_) {
      copy_inline(other);
      size_ = other.size_;
      return *this;
    }
    size_ = 0;
    append(other.data(), other.size_);
    return *this;
  }
  SmallVector& operator=(SmallVector&& other) noexcept {
    if (this != &other) {
      heap_.reset();
      capacity_ = N;
      steal(other);
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> values) {
    size_ = 0;
    append(values.begin(), values.size());
    return *this;
  }
  ~SmallVector() = default;

  T* data() noexcept { return heap_ ? heap_.get() : inline_; }
  const T* data() const noexcept { return heap_ ? heap_.get() : inline_; }
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

  void clear() noexcept { size_ = 0; }
  void reserve(std::size_t capacity) {
    if (capacity > capacity_) grow(capacity);
  }
  void push_back(const T& value) {
    if (size_ == capacity_) grow(capacity_ * 2);
    data()[size_++] = value;
  }
  void pop_back() noexcept { --size_; }
  void resize(std::size_t size) {
    reserve(size);
    for (std::size_t i = size_; i < size; ++i) data()[i] = T{};
    size_ = size;
  }
  // Grows or shrinks to `size` leaving new elements unset: for callers that write them all.
  void resize_for_overwrite(std::size_t size) {
    reserve(size);
    size_ = size;
  }
  void assign(std::span<const T> values) {
    size_ = 0;
    append(values.data(), values.size());
  }
  void append(const T* values, std::size_t count) {
    reserve(size_ + count);
    T* out = data() + size_;
    if (count <= N) {
      // Element by element: the copies of a few values that shapes and dims make cost less than
      // a call into memcpy. The empty asm keeps the compiler from turning the loop into that
      // call again.
      for (std::size_t i = 0; i < count; ++i) {
        std::memcpy(out + i, values + i, sizeof(T));
        asm("" : "+r"(i));
      }
    } else {
      std::memcpy(out, values, count * sizeof(T));
    }
    size_ += count;
  }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const SmallVector& a, const std::vector<T>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }

 private:
  void grow(std::size_t capacity) {
    auto bigger = std::make_unique_for_overwrite<T[]>(capacity);
    if (size_ != 0) std::memcpy(bigger.get(), data(), size_ * sizeof(T));
    heap_ = std::move(bigger);
    capacity_ = capacity;
  }
  // A fixed-size copy of the whole inline buffer compiles to a few vector moves, where a copy of
  // size_ elements would be a call into memcpy. The bytes past size_ are unused and may never
  // have been written, which GCC cannot see.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
  void copy_inline(const SmallVector& other) noexcept {
    std::memcpy(inline_, other.inline_, sizeof(inline_));
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  void steal(SmallVector& other) noexcept {
    if (other.heap_) {
      heap_ = std::move(other.heap_);
      capacity_ = other.capacity_;
    } else {
      copy_inline(other);
    }
    size_ = other.size_;
    other.size_ = 0;
    other.capacity_ = N;
  }

  std::unique_ptr<T[]> heap_;
  std::size_t size_ = 0;
  std::size_t capacity_ = N;
  T inline_[N];
};

}  // namespace meshgate

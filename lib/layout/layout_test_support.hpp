#pragma once
// Helpers shared by the layout module's tests: literals from CuTe text and error capture.
#include <gtest/gtest.h>

#include <string_view>

#include "core/error.hpp"
#include "layout/int_tuple.hpp"
#include "layout/layout.hpp"

namespace meshgate::testing {

inline IntTuple T(std::string_view text) { return parse_int_tuple(text); }
inline Layout L(std::string_view text) { return parse_layout(text); }

// Runs `f` and returns the Error it throws; fails the test when nothing is thrown.
template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected an Error";
  return Error(ErrorKind::runtime, "nothing thrown");
}

inline bool contains(const Error& e, std::string_view text) {
  return std::string_view(e.what()).find(text) != std::string_view::npos;
}

}  // namespace meshgate::testing

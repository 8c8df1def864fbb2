#pragma once
// The one error type of libmeshgate. Its kind mirrors the exception class the PyTorch
// reference raises for the same input, so a case can name the failure the way users know it.
#include <stdexcept>
#include <string>
#include <string_view>

namespace meshgate {

enum class ErrorKind {
  value,            // ValueError
  type,             // TypeError
  key,              // KeyError
  index,            // IndexError
  runtime,          // RuntimeError
  assertion,        // AssertionError: a precondition of the reference algorithm failed
  not_implemented,  // NotImplementedError
};

// "ValueError", "KeyError", ...: the PyTorch exception class for this kind.
constexpr std::string_view python_name(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::value: return "ValueError";
    case ErrorKind::type: return "TypeError";
    case ErrorKind::key: return "KeyError";
    case ErrorKind::index: return "IndexError";
    case ErrorKind::runtime: return "RuntimeError";
    case ErrorKind::assertion: return "AssertionError";
    case ErrorKind::not_implemented: return "NotImplementedError";
  }
  return "Error";
}

// what() reads "<PythonName>: <message>", e.g. "KeyError: Invalid mesh_dim_names ...".
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string_view message)
      : std::runtime_error(std::string(python_name(kind)) + ": " + std::string(message)),
        kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace meshgate

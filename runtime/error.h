// Errors of LiBai-Actor: one small typed hierarchy and the two check macros.
//
//   LIBAI_CHECK(x.dim() == 2, "matmul: expected a 2-d tensor, got shape ", x.shape());
//   LIBAI_CHECK_KIND(CorruptInput, ok, "safetensors header of ", path, " is truncated");
//   LIBAI_ASSERT(offset <= size, "internal: view past its storage");
//
// LIBAI_CHECK is for the caller's mistakes (InvalidArgument unless a kind is given),
// LIBAI_ASSERT for our own invariants (InternalError). Messages are built only on failure.
// Library code throws; it never exits the process. The CLI turns an Error into one line
// and an exit code; actors turn it into a caf::error at their boundary.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace libai {

enum class ErrorKind {
  invalid_argument,
  not_found,
  corrupt_input,
  unsupported,
  io,
  communication,
  internal,
  unavailable  // a service cannot take the request now (its queue is full, it is closing)
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

#define LIBAI_DEFINE_ERROR(Name, kind_value)                                             \
  class Name : public Error {                                                            \
   public:                                                                               \
    static constexpr ErrorKind kKind = ErrorKind::kind_value;                            \
    explicit Name(const std::string& message) : Error(ErrorKind::kind_value, message) {} \
  };

LIBAI_DEFINE_ERROR(InvalidArgument, invalid_argument)
LIBAI_DEFINE_ERROR(NotFound, not_found)
LIBAI_DEFINE_ERROR(CorruptInput, corrupt_input)
LIBAI_DEFINE_ERROR(Unsupported, unsupported)
LIBAI_DEFINE_ERROR(IoError, io)
LIBAI_DEFINE_ERROR(CommunicationError, communication)
LIBAI_DEFINE_ERROR(InternalError, internal)
LIBAI_DEFINE_ERROR(Unavailable, unavailable)
#undef LIBAI_DEFINE_ERROR

namespace detail {

template <typename T>
concept Streamable = requires(std::ostream& os, const T& v) {
  os << v;
};

// Containers without operator<< (shapes) print as [a, b, c].
template <typename T>
void append_one(std::ostringstream& os, const T& value) {
  if constexpr (Streamable<T>) {
    os << value;
  } else {
    os << '[';
    bool first = true;
    for (const auto& item : value) {
      if (!first) os << ", ";
      first = false;
      append_one(os, item);
    }
    os << ']';
  }
}

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (append_one(os, args), ...);
  return os.str();
}

[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

}  // namespace detail

// Builds a message from any streamable pieces (shapes print as [2, 3]).
template <typename... Args>
std::string str_cat(const Args&... args) {
  return detail::concat(args...);
}

}  // namespace libai

#define LIBAI_CHECK(cond, ...)                                            \
  do {                                                                    \
    if (!(cond)) [[unlikely]]                                             \
      ::libai::detail::throw_error(::libai::ErrorKind::invalid_argument,  \
                                   ::libai::detail::concat(__VA_ARGS__)); \
  } while (0)

#define LIBAI_CHECK_KIND(ErrorType, cond, ...)                        \
  do {                                                                \
    if (!(cond)) [[unlikely]]                                         \
      throw ::libai::ErrorType(::libai::detail::concat(__VA_ARGS__)); \
  } while (0)

#define LIBAI_THROW(ErrorType, ...) throw ::libai::ErrorType(::libai::detail::concat(__VA_ARGS__))

#define LIBAI_ASSERT(cond, ...)                                                               \
  do {                                                                                        \
    if (!(cond)) [[unlikely]]                                                                 \
      ::libai::detail::throw_error(                                                           \
          ::libai::ErrorKind::internal,                                                       \
          ::libai::detail::concat("internal error at ", __FILE__, ":", __LINE__, ": ", #cond, \
                                  " " __VA_OPT__(, ) __VA_ARGS__));                           \
  } while (0)

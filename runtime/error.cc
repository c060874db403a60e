#include "runtime/error.h"

namespace libai {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument: return "invalid argument";
    case ErrorKind::not_found: return "not found";
    case ErrorKind::corrupt_input: return "corrupt input";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::io: return "I/O error";
    case ErrorKind::communication: return "communication error";
    case ErrorKind::internal: return "internal error";
    case ErrorKind::unavailable: return "unavailable";
  }
  return "error";
}

namespace detail {

void throw_error(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::invalid_argument: throw InvalidArgument(message);
    case ErrorKind::not_found: throw NotFound(message);
    case ErrorKind::corrupt_input: throw CorruptInput(message);
    case ErrorKind::unsupported: throw Unsupported(message);
    case ErrorKind::io: throw IoError(message);
    case ErrorKind::communication: throw CommunicationError(message);
    case ErrorKind::internal: throw InternalError(message);
    case ErrorKind::unavailable: throw Unavailable(message);
  }
  throw InternalError(message);
}

}  // namespace detail
}  // namespace libai

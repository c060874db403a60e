// Whether this build runs under AddressSanitizer or ThreadSanitizer (GCC's and clang's ways of
// saying so), for the few places that must behave differently there:
//
//   if constexpr (kSanitizedBuild) { ... }
#pragma once

namespace libai {

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LIBAI_SANITIZED_BUILD 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#ifndef LIBAI_SANITIZED_BUILD
#define LIBAI_SANITIZED_BUILD 1
#endif
#endif

#ifdef LIBAI_SANITIZED_BUILD
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif

}  // namespace libai

# Warnings, CPU target and sanitizers, applied to every target of the project.
add_compile_options(-Wall -Wextra)
# Designated initializers that leave fields at their defaults ({.causal = true}) are the
# intended style for option structs; GCC would flag every one of them.
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-missing-field-initializers>)
if(LIBAI_NATIVE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
if(LIBAI_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${LIBAI_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  # Findings stay recoverable at compile time so that the suppressions file can silence the
  # ones inside third-party headers; the tests run with halt_on_error=1, so every other
  # finding still fails its test (tests/CMakeLists.txt sets the environment).
  # ThreadSanitizer cannot be combined with the others; it gets its own options: stop at the
  # first report, both stacks of a lock-order inversion, and tools/tsan.supp (races inside
  # uninstrumented libraries only; docs/SERVICE.md, "Thread safety").
  if(LIBAI_SANITIZE MATCHES "thread")
    set(LIBAI_SANITIZER_ENV
        "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${PROJECT_SOURCE_DIR}/tools/tsan.supp")
  else()
    set(LIBAI_SANITIZER_ENV
        "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=${PROJECT_SOURCE_DIR}/tools/ubsan.supp")
  endif()
  add_link_options(-fsanitize=${LIBAI_SANITIZE})
else()
  set(LIBAI_SANITIZER_ENV "LIBAI_SANITIZE=")
endif()

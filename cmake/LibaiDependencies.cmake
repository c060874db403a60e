# Every dependency comes from a Debian package; nothing is downloaded at build time.
find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CapnProto REQUIRED)
find_package(ucx REQUIRED)

# CAF 0.17 ships no CMake config: link its libraries by name.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
add_library(libai_caf INTERFACE)
target_include_directories(libai_caf SYSTEM INTERFACE ${CAF_INCLUDE_DIR})
target_link_libraries(libai_caf INTERFACE ${CAF_IO_LIBRARY} ${CAF_CORE_LIBRARY} Threads::Threads)
if(LIBAI_SANITIZE MATCHES "thread" AND NOT EXISTS "${CAF_INCLUDE_DIR}/../version")
  # tools/build_caf_tsan.sh leaves a version file next to its include folder.
  message(WARNING "LiBai-Actor: a ThreadSanitizer build with an uninstrumented CAF "
                  "(${CAF_CORE_LIBRARY}): ThreadSanitizer cannot see CAF's own hand-offs and "
                  "reports every actor as a race. `make tsan` builds an instrumented CAF "
                  "(tools/build_caf_tsan.sh).")
endif()

# OpenBLAS (Debian's pthread build through the alternatives link).
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas openblas-pthread REQUIRED)
find_library(OPENBLAS_LIBRARY NAMES openblas REQUIRED)

# oneDNN (Debian's libdnnl-dev, OpenMP runtime) runs bf16 matrix products on the CPU's native
# bf16 units (AVX512-BF16, AMX): Note [16-bit GEMM] in ops/cpu/matmul.cc. Linked by libai_ops
# only; without it bf16 products convert to f32 and use sgemm.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(DNNL_LIBRARY NAMES dnnl)
find_package(OpenMP COMPONENTS CXX)
if(DNNL_INCLUDE_DIR AND DNNL_LIBRARY AND OpenMP_CXX_FOUND)
  set(LIBAI_HAVE_ONEDNN ON)
else()
  message(STATUS "oneDNN not found: bf16 matmul converts to f32 (install libdnnl-dev)")
endif()

# ONNX (Debian's libonnx-dev, protobuf underneath) writes and checks the exported models of
# models/onnx/ (ONNX 1.12: opsets up to 17). Only the writer plugin links them (Note [ONNX
# writer plugin] in models/onnx/plugin/graph_data.h).
find_package(Protobuf REQUIRED)
find_package(ONNX CONFIG REQUIRED)

# CLI11 is header-only; Debian 12 ships headers and a CMake config.
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)

# SentencePiece (Debian's libsentencepiece-dev) reads T5 / Llama `.model` tokenizers for
# models/tokenizers/sentencepiece.cc; it ships no CMake config, so find it by name.
find_path(SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h REQUIRED)
find_library(SENTENCEPIECE_LIBRARY sentencepiece REQUIRED)

# PCRE2 (Debian's libpcre2-dev, 8-bit code units) runs the regex patterns of tokenizer.json's
# Split pre-tokenizer (Llama 3, Qwen2): models/tokenizers/regex.cc.
find_path(PCRE2_INCLUDE_DIR pcre2.h REQUIRED)
find_library(PCRE2_LIBRARY pcre2-8 REQUIRED)

# stb_image (Debian's libstb-dev) decodes PNG, JPEG, PNM and BMP for models/vision/image.cc,
# which compiles the header-only implementation itself: no library to link.
find_path(STB_INCLUDE_DIR stb_image.h PATH_SUFFIXES stb REQUIRED)

# cpp-httplib (Debian's libcpp-httplib-dev: a compiled library with a pkg-config file, whose
# header must see the same CPPHTTPLIB_* definitions) serves the HTTP API of
# service/http_server.cc (docs/SERVER.md says why this library).
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

if(LIBAI_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(LIBAI_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# One shared library per layer, each over the one below (docs/DESIGN.md):
#   libai_runtime  runtime/   tensor, autograd, config, communicators, checkpoint I/O
#   libai_ops      ops/       kernels (they register from static initialisers, kept by a shared library)
#   libai_models   models/
#   libai_train    train/     optimizers, LR schedules, clipping, loss scaling, loss heads, the step
#   libai_schedule schedule/  (pure: standard library and runtime value types only)
#   libai_service  service/   the facade for C++ services (request queues, continuous batching)
#   libai_app      app/       the application's own config schema (runtime/config is generic)
#   libai_plan     plan/      the planner: device and cost models, run and training plans, the
#                             auto-parallel searches (no CAF, no sockets; `libai-plan` links it alone)
#   libai_actors   actors/    the only place that knows CAF: the actors, actors/cluster/ (formation,
#                             liveness, control plane) and actors/jobs/ (run, train, serve drivers)
# `libai` is the umbrella target the examples link in the tree; an installed package exports
# libai::libai instead, without the actors (cmake/LibaiInstall.cmake, docs/PACKAGE.md).
include(GNUInstallDirs)
# Note [Library versions]: the layers are shared libraries named libai_<layer>.so.X.Y.Z with
# the SONAME libai_<layer>.so.X.Y while the major version is 0 (before 1.0 a minor release
# may change the ABI), libai_<layer>.so.X after.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(LIBAI_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
else()
  set(LIBAI_SOVERSION ${PROJECT_VERSION_MAJOR})
endif()
function(libai_collect out_var folder)
  file(GLOB_RECURSE found CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.cc)
  list(FILTER found EXCLUDE REGEX "/cuda/")
  list(FILTER found EXCLUDE REGEX "/plugin/")  # built as plugins of their own
  if(LIBAI_HAVE_CUDA)
    # Every cuda/ folder below `folder` (runtime/cuda, runtime/comm/cuda, ...).
    file(GLOB_RECURSE cuda_found CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.cc
         ${PROJECT_SOURCE_DIR}/${folder}/*.cu)
    list(FILTER cuda_found INCLUDE REGEX "/cuda/")
    list(APPEND found ${cuda_found})
  endif()
  set(${out_var} ${found} PARENT_SCOPE)
endfunction()

function(libai_layer_library name folder)
  libai_collect(sources ${folder})
  if(NOT sources)
    set(sources ${PROJECT_SOURCE_DIR}/cmake/empty.cc)
  endif()
  add_library(${name} SHARED ${sources})
  set_target_properties(${name} PROPERTIES PREFIX "" VERSION ${PROJECT_VERSION}
                                           SOVERSION ${LIBAI_SOVERSION})
  # Headers are included as "runtime/tensor.h", "models/model.h": from the source tree here,
  # from <prefix>/include/libai-actor once installed.
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                            $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/libai-actor>)
  if(LIBAI_HAVE_CUDA)
    target_link_libraries(${name} PRIVATE CUDA::cudart CUDA::cublas)
    target_compile_options(${name} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-fPIC -Xcompiler=-Wall>)
  endif()
endfunction()

libai_layer_library(libai_runtime runtime)
# Note [Installed interface]: the installed headers name only the standard library and
# nlohmann::json (config values, model configs), so an installed libai::runtime asks a
# consumer for nlohmann_json and Threads alone. spdlog (runtime/logging.h, not installed),
# yaml-cpp, OpenBLAS and CLI11 are used by the layers' own sources: they reach the other
# layers, the tests and the binary in this tree (BUILD_INTERFACE) but never a consumer.
target_compile_features(libai_runtime PUBLIC cxx_std_20)
target_include_directories(libai_runtime PUBLIC $<BUILD_INTERFACE:${OPENBLAS_INCLUDE_DIR}>
                                                $<BUILD_INTERFACE:${CLI11_INCLUDE_DIR}>)
target_link_libraries(libai_runtime PUBLIC nlohmann_json::nlohmann_json Threads::Threads
                                           $<BUILD_INTERFACE:spdlog::spdlog>
                                           $<BUILD_INTERFACE:yaml-cpp>
                                           $<BUILD_INTERFACE:${OPENBLAS_LIBRARY}>
                                    PRIVATE ucx::ucp ucx::uct ucx::ucs)
target_compile_definitions(libai_runtime PUBLIC $<BUILD_INTERFACE:LIBAI_VERSION="${PROJECT_VERSION}">)
if(LIBAI_HAVE_CUDA)
  target_compile_definitions(libai_runtime PUBLIC LIBAI_HAVE_CUDA=1)
  target_link_libraries(libai_runtime PRIVATE ${NCCL_LIBRARY})
  target_include_directories(libai_runtime PRIVATE ${NCCL_INCLUDE_DIR})
endif()

libai_layer_library(libai_ops ops)
target_link_libraries(libai_ops PUBLIC libai_runtime PRIVATE ${OPENBLAS_LIBRARY})
if(LIBAI_NATIVE)
  # GCC vectorises for 256-bit registers on AVX-512 cores unless told otherwise; the kernels'
  # loops (activations, norms, softmax) run faster on the full 512 bits (bench/RESULTS.md,
  # issue 19). A no-op on cores without AVX-512.
  target_compile_options(libai_ops PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-mprefer-vector-width=512>)
endif()
if(LIBAI_HAVE_ONEDNN)
  # OpenMP's runtime library only (omp_set_num_threads for oneDNN's thread count), no -fopenmp.
  target_link_libraries(libai_ops PRIVATE ${DNNL_LIBRARY} ${OpenMP_CXX_LIBRARIES})
  target_include_directories(libai_ops SYSTEM PRIVATE ${DNNL_INCLUDE_DIR})
  target_compile_definitions(libai_ops PRIVATE LIBAI_HAVE_ONEDNN=1)
endif()

libai_layer_library(libai_models models)
# libsentencepiece for models/tokenizers/sentencepiece.cc (SentencePiece .model tokenizers).
target_link_libraries(libai_models PUBLIC libai_ops PRIVATE ${SENTENCEPIECE_LIBRARY} ${PCRE2_LIBRARY} ${CMAKE_DL_LIBS})
# The ONNX writer: a plugin beside libai_models that it loads on first use, the only code
# that links protobuf (Note [ONNX writer plugin] in models/onnx/plugin/graph_data.h).
add_library(libai_onnx_writer MODULE ${PROJECT_SOURCE_DIR}/models/onnx/plugin/writer.cc)
set_target_properties(libai_onnx_writer PROPERTIES PREFIX "" CXX_VISIBILITY_PRESET hidden)
target_include_directories(libai_onnx_writer PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(libai_onnx_writer PRIVATE onnx onnx_proto protobuf::libprotobuf)
add_dependencies(libai_models libai_onnx_writer)
# stb_image.h for models/vision/image.cc and sentencepiece_processor.h (SYSTEM: their own
# warnings are not ours).
target_include_directories(libai_models SYSTEM PRIVATE ${STB_INCLUDE_DIR}
                                                       ${SENTENCEPIECE_INCLUDE_DIR}
                                                       ${PCRE2_INCLUDE_DIR})

libai_layer_library(libai_train train)
# The eager pipeline (train/pipeline_eager.h) runs schedule/ programs (pure: no cycle).
target_link_libraries(libai_train PUBLIC libai_models libai_schedule)

# The facade for services (service/service.h): above models/, no actors.
libai_layer_library(libai_service service)
target_link_libraries(libai_service PUBLIC libai_models)

libai_layer_library(libai_schedule schedule)
target_link_libraries(libai_schedule PUBLIC libai_runtime)

libai_layer_library(libai_app app)
target_link_libraries(libai_app PUBLIC libai_runtime)

# The planner (plan/): over schedule/ and the models' costs; what `libai-plan` links.
libai_layer_library(libai_plan plan)
target_link_libraries(libai_plan PUBLIC libai_models libai_schedule libai_app)

libai_layer_library(libai_actors actors)
# CAF, Cap'n Proto (libai_wire) and UCX reach this tree's users of the actors (the binary,
# tests, examples) but not an installed libai::actors: an API layer may use the actors in
# its implementation without a consumer needing their headers (cmake/LibaiInstall.cmake).
target_link_libraries(libai_actors PUBLIC libai_plan libai_models libai_train libai_schedule libai_service
                                          $<BUILD_INTERFACE:libai_wire> $<BUILD_INTERFACE:libai_caf>
                                          $<BUILD_INTERFACE:ucx::ucp> $<BUILD_INTERFACE:ucx::ucs>)

add_library(libai INTERFACE)
target_link_libraries(libai INTERFACE libai_actors libai_service)

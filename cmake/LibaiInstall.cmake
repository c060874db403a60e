# `cmake --install build --prefix P`: the layers' headers and shared libraries, the ONNX writer
# plugin, the libai-actor binary, a CMake package and a pkg-config file (docs/PACKAGE.md).
# Included last, once every target exists, so that a layer library added later (libai_service)
# is picked up by its `if(TARGET ...)` without a change here.
#
#   P/include/libai-actor/{runtime,ops,models,schedule,train,app,plan,service}/*.h, actors/jobs/cluster_service.h
#   P/lib/libai_<layer>.so.0.1.0 (+ .so.0.1, .so), libai_actors.so.0.1.0, libai_onnx_writer.so
#   P/bin/libai-actor, P/bin/libai-plan
#   P/lib/cmake/LiBaiActor/   find_package(LiBaiActor CONFIG): libai::libai, libai::<layer>
#   P/lib/pkgconfig/libai-actor.pc
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The layers a consumer compiles against, lowest first. libai_actors (CAF, Cap'n Proto, UCX)
# is not one of them: none of its headers are part of the API (see its install below).
set(LIBAI_API_LAYERS runtime ops models schedule train app plan)
if(TARGET libai_service)
  list(APPEND LIBAI_API_LAYERS service)
endif()
set(LIBAI_API_TARGETS)
foreach(layer ${LIBAI_API_LAYERS})
  set_target_properties(libai_${layer} PROPERTIES EXPORT_NAME ${layer})
  list(APPEND LIBAI_API_TARGETS libai_${layer})
endforeach()

# Note [Install RPATH]: every installed library finds the others in its own folder and the
# binary finds them in ../lib, wherever the prefix is moved, with no LD_LIBRARY_PATH. The
# ONNX writer plugin is found the same way: libai_models dlopens it from the folder that
# dladdr gives for libai_models itself (Note [ONNX writer plugin]), so it is installed beside it.
file(RELATIVE_PATH libai_bin_to_lib /${CMAKE_INSTALL_BINDIR} /${CMAKE_INSTALL_LIBDIR})
set(libai_installed_libraries ${LIBAI_API_TARGETS} libai_actors libai_onnx_writer)
set_target_properties(${libai_installed_libraries} PROPERTIES
  INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS ${LIBAI_API_TARGETS} EXPORT LiBaiActorTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
                NAMELINK_COMPONENT development)
# libai::actors is exported with one header, actors/jobs/cluster_service.h (a service joining a
# cluster: serve_cluster; no CAF in it), and libai::libai links it; its CAF, Cap'n Proto and
# UCX stay behind BUILD_INTERFACE (cmake/LibaiLibrary.cmake), so a consumer needs their shared
# libraries at run time but none of their headers.
set_target_properties(libai_actors PROPERTIES EXPORT_NAME actors)
install(TARGETS libai_actors EXPORT LiBaiActorTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
                NAMELINK_COMPONENT development)
install(TARGETS libai_onnx_writer LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
if(TARGET libai-actor)
  set_target_properties(libai-actor libai-plan PROPERTIES INSTALL_RPATH "$ORIGIN/${libai_bin_to_lib}"
                                                          INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS libai-actor libai-plan RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
endif()
install(FILES ${PROJECT_SOURCE_DIR}/actors/jobs/cluster_service.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/libai-actor/actors/jobs COMPONENT development)

# Headers: every header of the API layers but the CUDA backend's (included by .cc/.cu files
# only), the ONNX writer plugin's (private to models/onnx) and runtime/logging.h (it exposes
# spdlog; Note [Installed interface] in cmake/LibaiLibrary.cmake).
foreach(layer ${LIBAI_API_LAYERS})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/libai-actor/${layer} COMPONENT development
          FILES_MATCHING PATTERN "*.h"
          PATTERN "cuda" EXCLUDE
          PATTERN "plugin" EXCLUDE
          REGEX "/runtime/logging\\.h$" EXCLUDE)
endforeach()

# The umbrella a consumer links: every API layer (and through them nlohmann_json, Threads).
add_library(libai_package INTERFACE)
set_target_properties(libai_package PROPERTIES EXPORT_NAME libai)
target_link_libraries(libai_package INTERFACE ${LIBAI_API_TARGETS} libai_actors)
install(TARGETS libai_package EXPORT LiBaiActorTargets)

set(libai_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/LiBaiActor)
install(EXPORT LiBaiActorTargets NAMESPACE libai:: DESTINATION ${libai_cmake_dir}
        COMPONENT development)
string(JOIN ", " LIBAI_API_LAYER_LIST ${LIBAI_API_LAYERS})  # for the config's messages
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/LiBaiActorConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/LiBaiActorConfig.cmake
                              INSTALL_DESTINATION ${libai_cmake_dir})
# Before 1.0 a minor release may change the ABI (Note [Library versions]): 0.1.x asks for 0.1.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(libai_compatibility SameMinorVersion)
else()
  set(libai_compatibility SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/LiBaiActorConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY ${libai_compatibility})
install(FILES ${PROJECT_BINARY_DIR}/LiBaiActorConfig.cmake
              ${PROJECT_BINARY_DIR}/LiBaiActorConfigVersion.cmake
        DESTINATION ${libai_cmake_dir} COMPONENT development)

# pkg-config: prefix relative to the .pc file's folder, so that the file stays right when
# installed with `cmake --install --prefix` into a prefix other than CMAKE_INSTALL_PREFIX.
file(RELATIVE_PATH libai_pc_to_prefix /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" libai_pc_to_prefix "${libai_pc_to_prefix}")
set(libai_pc_libs)
foreach(target ${LIBAI_API_TARGETS})
  # libai_runtime.so answers to -lai_runtime (lib + ai_runtime + .so).
  string(REGEX REPLACE "^lib" "-l" flag ${target})
  list(PREPEND libai_pc_libs ${flag})  # highest layer first, for static-minded linkers
endforeach()
list(PREPEND libai_pc_libs -lai_actors)
string(JOIN " " libai_pc_libs ${libai_pc_libs})
configure_file(${PROJECT_SOURCE_DIR}/cmake/libai-actor.pc.in ${PROJECT_BINARY_DIR}/libai-actor.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/libai-actor.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT development)

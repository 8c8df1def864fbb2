# `cmake --install`: libmeshgate (headers, static libraries, the exported meshgate package),
# the runner, the driver with its launcher, the cases and the schemas.
#   <prefix>/include/meshgate/<module>/*.hpp      included as "<module>/<file>.hpp"
#   <prefix>/include/meshgate/runner/             the runner's headers, for kinds of other projects
#   <prefix>/lib/cmake/meshgate/                  find_package(meshgate [COMPONENTS runner])
#   <prefix>/bin/meshgate-runner, bin/meshgate-plan, bin/meshgate
#   <prefix>/lib/meshgate/python/meshgate/        the driver package
#   <prefix>/share/meshgate/cases, share/meshgate/schemas
# The runner, the planner and the cases are the install component `runner`, all that a wheel
# (`pip install .`, pyproject.toml) takes: scikit-build-core builds with SKBUILD set, and they go
# to the environment's bin/ and share/meshgate/cases, where the driver of the wheel finds them
# as it finds those of `cmake --install` (harness/meshgate/system/build.py).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

if(SKBUILD)
  set(MESHGATE_RUNNER_BINDIR ${SKBUILD_SCRIPTS_DIR})
  set(MESHGATE_RUNNER_DATADIR ${SKBUILD_DATA_DIR}/share)
else()
  set(MESHGATE_RUNNER_BINDIR ${CMAKE_INSTALL_BINDIR})
  set(MESHGATE_RUNNER_DATADIR ${CMAKE_INSTALL_DATADIR})
endif()

set(MESHGATE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/meshgate)
set(_meshgate_exported meshgate_core meshgate_build_options meshgate_layout meshgate_mesh
    meshgate_placement meshgate_plan meshgate_gemm meshgate_comm meshgate_redistribute meshgate)
foreach(_target IN LISTS _meshgate_exported)
  string(REGEX REPLACE "^meshgate_" "" _name ${_target})
  set_target_properties(${_target} PROPERTIES EXPORT_NAME ${_name})
endforeach()

install(TARGETS ${_meshgate_exported} EXPORT meshgateTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/meshgate)
install(DIRECTORY lib/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/meshgate
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*test*" EXCLUDE)
install(EXPORT meshgateTargets NAMESPACE meshgate:: DESTINATION ${MESHGATE_CMAKE_DIR})
# The runner's process backend links MPI's C++ API (harness/runner/CMakeLists.txt).
set(MESHGATE_RUNNER_MPI OFF)
if(TARGET meshgate_runner_core)
  get_target_property(_meshgate_runner_links meshgate_runner_core LINK_LIBRARIES)
  if("MPI::MPI_CXX" IN_LIST _meshgate_runner_links)
    set(MESHGATE_RUNNER_MPI ON)
  endif()
endif()
configure_package_config_file(cmake/meshgateConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/meshgateConfig.cmake
                              INSTALL_DESTINATION ${MESHGATE_CMAKE_DIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/meshgateConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/meshgateConfig.cmake
              ${PROJECT_BINARY_DIR}/meshgateConfigVersion.cmake cmake/FindNCCL.cmake
        DESTINATION ${MESHGATE_CMAKE_DIR})

if(MESHGATE_BUILD_HARNESS)
  install(TARGETS meshgate-runner meshgate-plan RUNTIME DESTINATION ${MESHGATE_RUNNER_BINDIR}
          COMPONENT runner)
  # The runner as libraries, for a runner with kinds of another project's own
  # (docs/own-kernels.md): find_package(meshgate COMPONENTS runner) loads them, with the
  # packages they need, from meshgateRunnerTargets.cmake.
  set(_meshgate_runner_exported meshgate_runner_core meshgate_runner_kinds meshgate_runner_main)
  foreach(_target IN LISTS _meshgate_runner_exported)
    string(REGEX REPLACE "^meshgate_" "" _name ${_target})
    set_target_properties(${_target} PROPERTIES EXPORT_NAME ${_name})
  endforeach()
  target_include_directories(meshgate_runner_core PUBLIC
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/meshgate/runner>)
  install(TARGETS ${_meshgate_runner_exported} EXPORT meshgateRunnerTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT meshgateRunnerTargets NAMESPACE meshgate:: DESTINATION ${MESHGATE_CMAKE_DIR})
  install(DIRECTORY harness/runner/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/meshgate/runner
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*test*" EXCLUDE)
  set(MESHGATE_PYTHON_DIR ${CMAKE_INSTALL_LIBDIR}/meshgate/python)
  install(DIRECTORY harness/meshgate DESTINATION ${MESHGATE_PYTHON_DIR}
          PATTERN "__pycache__" EXCLUDE)
  configure_file(cmake/meshgate-launcher.py.in ${PROJECT_BINARY_DIR}/meshgate-launcher @ONLY)
  install(PROGRAMS ${PROJECT_BINARY_DIR}/meshgate-launcher DESTINATION ${CMAKE_INSTALL_BINDIR}
          RENAME meshgate)
  install(DIRECTORY cases/ DESTINATION ${MESHGATE_RUNNER_DATADIR}/meshgate/cases COMPONENT runner)
  install(DIRECTORY harness/meshgate/schemas/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshgate/schemas)
endif()

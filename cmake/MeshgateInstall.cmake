# `cmake --install`: libmeshgate (headers, static libraries, the exported meshgate package),
# the runner, the driver with its launcher, the cases and the schemas.
#   <prefix>/include/meshgate/<module>/*.hpp      included as "<module>/<file>.hpp"
#   <prefix>/lib/cmake/meshgate/                  find_package(meshgate)
#   <prefix>/bin/meshgate-runner, bin/meshgate-plan, bin/meshgate
#   <prefix>/lib/meshgate/python/meshgate/        the driver package
#   <prefix>/share/meshgate/cases, share/meshgate/schemas
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

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
  install(TARGETS meshgate-runner meshgate-plan RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  set(MESHGATE_PYTHON_DIR ${CMAKE_INSTALL_LIBDIR}/meshgate/python)
  install(DIRECTORY harness/meshgate DESTINATION ${MESHGATE_PYTHON_DIR}
          PATTERN "__pycache__" EXCLUDE)
  configure_file(cmake/meshgate-launcher.py.in ${PROJECT_BINARY_DIR}/meshgate-launcher @ONLY)
  install(PROGRAMS ${PROJECT_BINARY_DIR}/meshgate-launcher DESTINATION ${CMAKE_INSTALL_BINDIR}
          RENAME meshgate)
  install(DIRECTORY cases/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshgate/cases)
  install(DIRECTORY harness/meshgate/schemas/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshgate/schemas)
endif()

# Installs the libraries, public headers, tools, a CMake package (attend::attend, also
# attend::attend_core alone; a SameMajorVersion version file) and pkg-config files (attend,
# attend-core).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_attend_targets attend attend_core)
if(TARGET attend_layer)
  list(APPEND _attend_targets attend_layer)
endif()
install(TARGETS ${_attend_targets} EXPORT attendTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/attend DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/runtime/include/attend/version.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attend)
install(EXPORT attendTargets NAMESPACE attend:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attend)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/attendConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/attendConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attend)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attendConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attendConfig.cmake ${PROJECT_BINARY_DIR}/attendConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attend)

configure_file(${PROJECT_SOURCE_DIR}/cmake/attend.pc.in ${PROJECT_BINARY_DIR}/attend.pc @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/attend-core.pc.in ${PROJECT_BINARY_DIR}/attend-core.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/attend-core.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(TARGET attend_layer)
  install(FILES ${PROJECT_BINARY_DIR}/attend.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()

foreach(tool attend-bench attend-run attend-info attend-report)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

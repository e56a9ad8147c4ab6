# Installs the library, public headers, tools and a CMake package (attend::attend, with a
# SameMajorVersion version file) and a pkg-config file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS attend EXPORT attendTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/attend DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/attend/version.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attend)
install(EXPORT attendTargets NAMESPACE attend:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attend)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/attendConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/attendConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attend)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attendConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attendConfig.cmake ${PROJECT_BINARY_DIR}/attendConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attend)

configure_file(${PROJECT_SOURCE_DIR}/cmake/attend.pc.in ${PROJECT_BINARY_DIR}/attend.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/attend.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

foreach(tool attend-bench attend-run attend-info)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

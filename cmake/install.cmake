# Installation: the library, its headers under include/mantissa/<layer>/ and the programs, plus a CMake
# package so that find_package(mantissa CONFIG) gives mantissa::mantissa. Included by CMakeLists.txt.
include(CMakePackageConfigHelpers)

set(MANTISSA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mantissa)

install(TARGETS mantissa EXPORT mantissa-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mantissa)
if(MANTISSA_PROGRAMS)
  install(TARGETS ${MANTISSA_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# Headers keep the source layout, so "framework/tensor.h" resolves the same way installed or not.
foreach(layer IN LISTS MANTISSA_LAYERS)
  install(DIRECTORY ${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mantissa/${layer}
          FILES_MATCHING PATTERN "*.h")
endforeach()

install(EXPORT mantissa-targets NAMESPACE mantissa:: DESTINATION ${MANTISSA_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/mantissa-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/mantissa-config.cmake
  INSTALL_DESTINATION ${MANTISSA_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/mantissa-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/mantissa-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/mantissa-config-version.cmake
        DESTINATION ${MANTISSA_INSTALL_CMAKEDIR})

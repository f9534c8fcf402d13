# Installation: the libraries (one per layer, and mantissa::mantissa over them), their headers under include/mantissa/<layer>/ and the programs, plus a CMake
# package so that find_package(mantissa CONFIG) gives mantissa::mantissa. Included by CMakeLists.txt.
# Components: "library" (the layer archives, headers, package files) and "programs" (mantissa-*
# executables). A plain `cmake --install build --prefix P` works after any build: after a library-only
# build (`cmake --build build --target mantissa-library`) it installs the library and skips the programs
# that were not built (OPTIONAL); `--component library` leaves the programs out even when they were built.
include(CMakePackageConfigHelpers)

# The library-only build: the layer archives the library component installs, nothing else (mantissa itself
# is an INTERFACE target, which has no build rule to ask for).
add_custom_target(mantissa-library)
add_dependencies(mantissa-library ${MANTISSA_LAYER_TARGETS})

set(MANTISSA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mantissa)

install(TARGETS mantissa ${MANTISSA_LAYER_TARGETS} EXPORT mantissa-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mantissa)
if(MANTISSA_PROGRAMS)
  install(TARGETS ${MANTISSA_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT programs OPTIONAL)
endif()

# Headers keep the source layout, so "framework/tensor.h" resolves the same way installed or not. Internal
# headers that include a dependency's private headers (HDF5's) stay out.
foreach(layer IN LISTS MANTISSA_LAYERS)
  if(EXISTS ${mantissa_SOURCE_DIR}/${layer})
    install(DIRECTORY ${mantissa_SOURCE_DIR}/${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mantissa/${layer}
            COMPONENT library FILES_MATCHING PATTERN "*.h" PATTERN "checkpoint_h5.h" EXCLUDE)
  endif()
endforeach()

install(EXPORT mantissa-targets NAMESPACE mantissa:: DESTINATION ${MANTISSA_INSTALL_CMAKEDIR}
        COMPONENT library)
configure_package_config_file(${mantissa_SOURCE_DIR}/cmake/mantissa-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/mantissa-config.cmake
  INSTALL_DESTINATION ${MANTISSA_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/mantissa-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/mantissa-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/mantissa-config-version.cmake
        DESTINATION ${MANTISSA_INSTALL_CMAKEDIR} COMPONENT library)
install(FILES ${mantissa_SOURCE_DIR}/cmake/modules/FindDNNL.cmake
              ${mantissa_SOURCE_DIR}/cmake/modules/MantissaFindCUDAToolkit.cmake
        DESTINATION ${MANTISSA_INSTALL_CMAKEDIR}/modules COMPONENT library)

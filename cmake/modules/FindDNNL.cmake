# FindDNNL: oneDNN's CPU library, found by its header and shared library alone.
#
# Why not oneDNN's own package config (find_package(dnnl CONFIG))? Debian's and Ubuntu's libdnnl-dev are
# built with the OpenCL GPU runtime, and their dnnl-config.cmake does find_package(OpenCL REQUIRED): a
# configure error on any machine without OpenCL's development files, which are only a "Recommends" of
# libdnnl-dev. mantissa uses oneDNN's CPU engine alone and never includes its OpenCL headers, so it needs
# nothing but dnnl.hpp and libdnnl.so; the shared library brings its own run-time dependencies
# (libOpenCL.so.1 from ocl-icd-libopencl1, a hard Depends) when it is loaded. This module therefore works
# the same whatever GPU runtime a distribution built oneDNN with, and whether or not that runtime's
# development files are installed.
#
# Result: the imported target DNNL::dnnl (the name oneDNN's own config gives it, so a project that has
# already loaded that config keeps its target), DNNL_FOUND, DNNL_VERSION, DNNL_INCLUDE_DIR, DNNL_LIBRARY.
# Hints: DNNL_ROOT or CMAKE_PREFIX_PATH for an installation outside the system prefix.

find_path(DNNL_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.hpp DOC "Folder holding oneapi/dnnl/dnnl.hpp")
find_library(DNNL_LIBRARY NAMES dnnl DOC "oneDNN's shared library (libdnnl.so)")

if(DNNL_INCLUDE_DIR AND EXISTS "${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h")
  file(STRINGS "${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h" _dnnl_version_lines
       REGEX "^#define DNNL_VERSION_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define DNNL_VERSION_${_part} +([0-9]+).*" "\\1" _dnnl_${_part}
           "${_dnnl_version_lines}")
  endforeach()
  set(DNNL_VERSION "${_dnnl_MAJOR}.${_dnnl_MINOR}.${_dnnl_PATCH}")
  unset(_dnnl_version_lines)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(DNNL
  REQUIRED_VARS DNNL_LIBRARY DNNL_INCLUDE_DIR
  VERSION_VAR DNNL_VERSION
  REASON_FAILURE_MESSAGE "install Debian's libdnnl-dev (scripts/install-deps.sh does), or set DNNL_ROOT")
mark_as_advanced(DNNL_INCLUDE_DIR DNNL_LIBRARY)

if(DNNL_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES
    IMPORTED_LOCATION "${DNNL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE_DIR}")
endif()

# mantissa_find_cuda_toolkit([REQUIRED|QUIET]): find_package(CUDAToolkit) that works with CMake 3.25.0/3.25.1
# (Debian 12's cmake is 3.25.1) and CUDA 12.9 or newer.
#
# Those CMake releases set a DEPRECATION property on CUDA::nvToolsExt without checking that the target
# exists ("set_property could not find TARGET CUDA::nvToolsExt"), and CUDA 13 no longer ships
# libnvToolsExt, so the target is never made and configure stops. CMake 3.25.2 added the check. The buggy
# line runs only when the project's cmake_minimum_required is 3.25 or more, so the macro lowers that
# variable (information only: policies are not affected) around the call and restores it.
macro(mantissa_find_cuda_toolkit)
  if(CMAKE_VERSION VERSION_LESS 3.25.2 AND CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)
    set(_mantissa_saved_minimum ${CMAKE_MINIMUM_REQUIRED_VERSION})
    set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
    find_package(CUDAToolkit ${ARGN})
    set(CMAKE_MINIMUM_REQUIRED_VERSION ${_mantissa_saved_minimum})
    unset(_mantissa_saved_minimum)
  else()
    find_package(CUDAToolkit ${ARGN})
  endif()
endmacro()

# cmake -P script behind the Package.* tests (see CMakeLists.txt here). MODE is find_package or
# add_subdirectory; WORK_DIR is wiped and rebuilt on every run.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc}):\n${ARGN}\n${out}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(configure_args -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_BUILD_TYPE=Release -DMODE=${MODE})

if(MODE STREQUAL "find_package")
  set(prefix ${WORK_DIR}/prefix)
  # Only the library component: the test must not depend on the programs having been built.
  run("install" ${CMAKE_COMMAND} --install ${MANTISSA_BUILD_DIR} --prefix ${prefix} --component library)
  # The files docs/library.md says an install gives: the package, the headers, one archive per layer.
  set(archives "")
  foreach(layer framework ops optim amp data models train)
    list(APPEND archives lib/libmantissa_${layer}.a)
  endforeach()
  foreach(f lib/cmake/mantissa/mantissa-config.cmake lib/cmake/mantissa/mantissa-config-version.cmake
            include/mantissa/framework/tensor.h ${archives})
    if(NOT EXISTS ${prefix}/${f})
      message(FATAL_ERROR "install: ${prefix}/${f} is missing")
    endif()
  endforeach()
  run("consumer configure" ${CMAKE_COMMAND} ${configure_args} -DCMAKE_PREFIX_PATH=${prefix})
  run("consumer build" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
  run("consumer run" ${WORK_DIR}/build/consumer)
  if(NOT last_output MATCHES "consumer: sum 14")
    message(FATAL_ERROR "consumer printed an unexpected result:\n${last_output}")
  endif()
  message(STATUS "${last_output}")
elseif(MODE STREQUAL "add_subdirectory")
  run("consumer configure" ${CMAKE_COMMAND} ${configure_args} -DMANTISSA_SOURCE_DIR=${MANTISSA_SOURCE_DIR}
      -DMANTISSA_CUDA=${MANTISSA_CUDA} -DMANTISSA_MPI=${MANTISSA_MPI})
  if(NOT last_output MATCHES "consumer: mantissa::mantissa is an alias")
    message(FATAL_ERROR "configure did not see the mantissa::mantissa alias:\n${last_output}")
  endif()
else()
  message(FATAL_ERROR "MODE must be find_package or add_subdirectory, got '${MODE}'")
endif()

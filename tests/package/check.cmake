# cmake -P script behind the Package.* tests (see CMakeLists.txt here). MODE is find_package,
# add_subdirectory or documented_install; WORK_DIR is wiped and rebuilt on every run (documented_install keeps
# its build tree, so that a compiler cache finds the same paths from one run to the next).
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc}):\n${ARGN}\n${out}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

if(MODE STREQUAL "documented_install")
  file(REMOVE_RECURSE ${WORK_DIR}/prefix ${WORK_DIR}/build)
else()
  file(REMOVE_RECURSE ${WORK_DIR})
endif()
set(configure_args -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_BUILD_TYPE=Release -DMODE=${MODE})

# The consumer, configured against the installed package in `prefix`, built and run.
function(check_consumer prefix)
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
endfunction()

if(MODE STREQUAL "find_package")
  # Only the library component, from the suite's own (complete) build.
  run("install" ${CMAKE_COMMAND} --install ${MANTISSA_BUILD_DIR} --prefix ${WORK_DIR}/prefix --component library)
  check_consumer(${WORK_DIR}/prefix)
elseif(MODE STREQUAL "documented_install")
  # The library user's sequence, as written: configure, build the library alone (no program), install with
  # no component named. Without CUDA and MPI, so that it compiles the CPU library only (a few minutes with a
  # cold compiler cache on 2 cores; the rules it checks are the same in every configuration).
  set(tree ${WORK_DIR}/mantissa-build)
  set(prefix ${WORK_DIR}/prefix)
  run("library configure" ${CMAKE_COMMAND} -S ${MANTISSA_SOURCE_DIR} -B ${tree} -G ${GENERATOR}
      -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_C_COMPILER=${C_COMPILER}
      -DCMAKE_BUILD_TYPE=Release -DMANTISSA_BUILD_TESTS=OFF -DMANTISSA_BUILD_BENCH=OFF -DMANTISSA_CUDA=OFF
      -DMANTISSA_MPI=OFF)
  run("library build" ${CMAKE_COMMAND} --build ${tree} --target mantissa-library)
  if(EXISTS ${tree}/train/mantissa-train)
    message(FATAL_ERROR "the library-only build built mantissa-train: the test no longer checks what it says")
  endif()
  run("install" ${CMAKE_COMMAND} --install ${tree} --prefix ${prefix})
  file(GLOB archives ${prefix}/lib/libmantissa_*.a)
  list(LENGTH archives n_archives)
  if(n_archives EQUAL 0 OR EXISTS ${prefix}/bin/mantissa-train)
    message(FATAL_ERROR "install after a library-only build: expected the libmantissa_<layer>.a archives and no "
                        "bin/mantissa-train, got ${n_archives} archives")
  endif()
  check_consumer(${prefix})
elseif(MODE STREQUAL "add_subdirectory")
  run("consumer configure" ${CMAKE_COMMAND} ${configure_args} -DMANTISSA_SOURCE_DIR=${MANTISSA_SOURCE_DIR}
      -DMANTISSA_CUDA=${MANTISSA_CUDA} -DMANTISSA_MPI=${MANTISSA_MPI})
  if(NOT last_output MATCHES "consumer: mantissa::mantissa is an alias")
    message(FATAL_ERROR "configure did not see the mantissa::mantissa alias:\n${last_output}")
  endif()
else()
  message(FATAL_ERROR "MODE must be find_package, add_subdirectory or documented_install, got '${MODE}'")
endif()

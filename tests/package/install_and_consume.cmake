# Installs the build into a fresh prefix, then builds tests/package/consumer against it with
# find_package(normcheck) and, separately, with the installed pkg-config file; runs both and checks that
# they compute the seed example: global_mean -3/2, local_mean -1, scaled_sum -3/2.
#   cmake -DBUILD=<build dir> -DSOURCE=<project dir> -DWORK=<scratch dir> [-DCONSUMER_FLAGS=<flags>]
#         -P install_and_consume.cmake
# CONSUMER_FLAGS are the compile and link flags the installed library needs beyond its package's own
# (the sanitizer runtimes of a sanitized build).
file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "failed (${status}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})
foreach(installed bin/normcheck include/normcheck/core/rational.hpp include/normcheck/version.hpp
        share/bash-completion/completions/normcheck)
  if(NOT EXISTS ${prefix}/${installed})
    message(FATAL_ERROR "not installed: ${installed}")
  endif()
endforeach()
file(GLOB_RECURSE config ${prefix}/*/normcheckConfig.cmake)
file(GLOB_RECURSE pc ${prefix}/*/normcheck.pc)
if(NOT config OR NOT pc)
  message(FATAL_ERROR "no normcheckConfig.cmake or normcheck.pc under ${prefix}")
endif()

set(expected "global_mean -3/2, local_mean -1, scaled_sum -3/2")

# The CMake package.
run(${CMAKE_COMMAND} -S ${SOURCE}/tests/package/consumer -B ${WORK}/consumer -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=${CONSUMER_FLAGS}")
run(${CMAKE_COMMAND} --build ${WORK}/consumer)
run(${WORK}/consumer/seed_example)
if(NOT last_output MATCHES "${expected}")
  message(FATAL_ERROR "the consumer printed: ${last_output}")
endif()
message(STATUS "find_package(normcheck): ${last_output}")

# The pkg-config file.
get_filename_component(pc_dir ${pc} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
execute_process(COMMAND pkg-config --cflags --libs normcheck RESULT_VARIABLE status OUTPUT_VARIABLE flags
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "pkg-config does not know normcheck")
endif()
separate_arguments(flags UNIX_COMMAND "${CONSUMER_FLAGS} ${flags}")
run(c++ ${SOURCE}/tests/package/consumer/seed_example.cpp -o ${WORK}/seed_example_pc ${flags})
run(${WORK}/seed_example_pc)
if(NOT last_output MATCHES "${expected}")
  message(FATAL_ERROR "the pkg-config consumer printed: ${last_output}")
endif()
message(STATUS "pkg-config normcheck: ${last_output}")

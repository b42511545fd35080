# Checks the same paths with --jobs 1 and --jobs 2 (and 7, more threads than cores) and requires the same
# exit status, the same text and JSON reports byte for byte, and the same JUnit file: the order of the
# reports and every error position do not depend on how many files are checked at once.
#   cmake -DNORMCHECK=<executable> -DPATHS=<path;path...> -DWORK=<scratch dir> -P jobs_differential.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
foreach(format text json)
  set(flags "")
  if(format STREQUAL "json")
    set(flags --json)
  endif()
  foreach(jobs 1 2 7)
    execute_process(COMMAND ${NORMCHECK} check ${flags} --jobs ${jobs} --junit ${WORK}/junit_${format}_${jobs}.xml ${PATHS}
                    RESULT_VARIABLE status_${jobs} OUTPUT_VARIABLE out_${jobs} ERROR_VARIABLE err_${jobs})
    file(READ ${WORK}/junit_${format}_${jobs}.xml junit_${jobs})
  endforeach()
  string(LENGTH "${out_1}" length)
  if(length LESS 1000)
    message(FATAL_ERROR "the ${format} report is too short to compare (${length} bytes):\n${out_1}${err_1}")
  endif()
  foreach(jobs 2 7)
    if(NOT status_${jobs} STREQUAL status_1 OR NOT out_${jobs} STREQUAL out_1 OR NOT err_${jobs} STREQUAL err_1
       OR NOT junit_${jobs} STREQUAL junit_1)
      file(WRITE ${WORK}/${format}_1.out "${out_1}")
      file(WRITE ${WORK}/${format}_${jobs}.out "${out_${jobs}}")
      message(FATAL_ERROR "--jobs ${jobs} differs from --jobs 1 in the ${format} report (exit ${status_${jobs}} vs "
                          "${status_1}); both are in ${WORK}")
    endif()
  endforeach()
  message(STATUS "${format}: exit ${status_1}, ${length} bytes, the same for --jobs 1, 2 and 7")
endforeach()

# End to end: a counterexample printed by a failing law, saved as a file, is read by `normcheck check`
# and reproduces the failure; the printed RC_PARAMS line replays the same case; the documented version
# (true values as `expect`) holds. Used as:
#   cmake -DPROGRAM=... -DNORMCHECK=... -DNORMALIZATION=... -DWORK=dir -P replay_counterexample.cmake
string(MAKE_C_IDENTIFIER "${NORMALIZATION}" stem)
set(file "${WORK}/${stem}.json")
file(MAKE_DIRECTORY "${WORK}")

execute_process(COMMAND "${PROGRAM}" "${NORMALIZATION}" RESULT_VARIABLE status OUTPUT_VARIABLE document
                ERROR_VARIABLE report TIMEOUT 120)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "no counterexample printed (status ${status})\n${report}")
endif()
string(FIND "${report}" "${document}" printed)
if(printed EQUAL -1)
  message(FATAL_ERROR "the failure report does not hold the document written\n${report}")
endif()
file(WRITE "${file}" "${document}")

execute_process(COMMAND "${NORMCHECK}" check "${file}" RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 1 OR NOT out MATCHES "DOES NOT HOLD")
  message(FATAL_ERROR "normcheck check exited ${status} on the saved counterexample, expected 1\n${out}${err}\n${document}")
endif()

if(NOT report MATCHES "To reproduce: RC_PARAMS=\"([^\"]+)\"")
  message(FATAL_ERROR "no reproduce string in the report\n${report}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -E env "RC_PARAMS=${CMAKE_MATCH_1}" "${PROGRAM}" "${NORMALIZATION}"
                RESULT_VARIABLE status OUTPUT_VARIABLE replayed ERROR_VARIABLE err TIMEOUT 120)
if(NOT status EQUAL 0 OR NOT replayed STREQUAL document)
  message(FATAL_ERROR "the reproduce string did not replay the same counterexample (status ${status})\n${replayed}\n${err}")
endif()

execute_process(COMMAND "${PROGRAM}" "${NORMALIZATION}" --documented RESULT_VARIABLE status OUTPUT_VARIABLE documented
                ERROR_VARIABLE err TIMEOUT 120)
file(WRITE "${WORK}/${stem}_documented.json" "${documented}")
execute_process(COMMAND "${NORMCHECK}" check "${WORK}/${stem}_documented.json" RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the documented counterexample does not hold (status ${status})\n${out}${err}")
endif()
message(STATUS "replayed ${file}:\n${document}")

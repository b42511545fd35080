# Runs COMMAND (a ;-list) and requires exit status EXPECT_STATUS; if EXPECT_OUTPUT is set, stdout and
# stderr together must match that regular expression; if INPUT is set, that file is standard input.
# Used as: cmake -D... -P expect_exit.cmake
if(DEFINED INPUT)
  set(input INPUT_FILE ${INPUT})
endif()
execute_process(COMMAND ${COMMAND} ${input} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT status STREQUAL "${EXPECT_STATUS}")
  message(FATAL_ERROR "exit status ${status}, expected ${EXPECT_STATUS}\n--- stdout\n${out}\n--- stderr\n${err}")
endif()
if(DEFINED EXPECT_OUTPUT AND NOT "${out}${err}" MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "output does not match '${EXPECT_OUTPUT}'\n--- stdout\n${out}\n--- stderr\n${err}")
endif()

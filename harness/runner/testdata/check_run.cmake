# Runs meshgate-runner and checks its exit code and output, for CTest:
#   cmake -DRUNNER=... -DARGS="run|file.yaml|..." -DEXPECT_CODE=2 [-DEXPECT_STDERR=regex]
#         [-DEXPECT_STDOUT=regex] [-DEXPECT_FILE=path] [-DEXPECT_FILE_MATCHES=regex]
#         [-DPYTHON=python3 -DHARNESS=harness/] -P check_run.cmake
# With PYTHON and HARNESS, an expected results.json is also validated against the shipped
# results schema (harness/meshgate/schemas/results-1.schema.json).
string(REPLACE "|" ";" ARGS "${ARGS}")
execute_process(COMMAND ${RUNNER} ${ARGS} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code STREQUAL EXPECT_CODE)
  message(FATAL_ERROR "exit code ${code}, expected ${EXPECT_CODE}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(DEFINED EXPECT_STDERR AND NOT err MATCHES "${EXPECT_STDERR}")
  message(FATAL_ERROR "stderr does not match '${EXPECT_STDERR}':\n${err}")
endif()
if(DEFINED EXPECT_STDOUT AND NOT out MATCHES "${EXPECT_STDOUT}")
  message(FATAL_ERROR "stdout does not match '${EXPECT_STDOUT}':\n${out}")
endif()
if(DEFINED EXPECT_FILE)
  if(NOT EXISTS "${EXPECT_FILE}")
    message(FATAL_ERROR "${EXPECT_FILE} was not written")
  endif()
  file(READ "${EXPECT_FILE}" content)
  if(DEFINED EXPECT_FILE_MATCHES AND NOT content MATCHES "${EXPECT_FILE_MATCHES}")
    message(FATAL_ERROR "${EXPECT_FILE} does not match '${EXPECT_FILE_MATCHES}':\n${content}")
  endif()
endif()
if(DEFINED EXPECT_FILE AND EXPECT_FILE MATCHES "results\\.json$" AND DEFINED PYTHON)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${HARNESS}
                          ${PYTHON} -m meshgate.schema results-1 ${EXPECT_FILE}
                  RESULT_VARIABLE schema_code ERROR_VARIABLE schema_err)
  if(NOT schema_code EQUAL 0)
    message(FATAL_ERROR "${EXPECT_FILE} does not match the results schema:\n${schema_err}")
  endif()
endif()

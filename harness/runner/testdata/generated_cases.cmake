# Writes a large generated case file with generate_mesh_cases.py, then runs meshgate-runner on
# it and checks the result as check_run.cmake does, for CTest:
#   cmake -DPYTHON=python3 -DGENERATOR=generate_mesh_cases.py -DCOUNT=10000 -DCASE_FILE=f.yaml
#         -DRUNNER=... -DARGS="list|f.yaml" -DEXPECT_CODE=0 [-DEXPECT_STDOUT=regex] ...
#         -P generated_cases.cmake
execute_process(COMMAND ${PYTHON} ${GENERATOR} ${CASE_FILE} --count ${COUNT}
                RESULT_VARIABLE generated ERROR_VARIABLE generator_err)
if(NOT generated EQUAL 0)
  message(FATAL_ERROR "generate_mesh_cases.py failed:\n${generator_err}")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/check_run.cmake)

# CTest tests of the real meshgate-runner binary on the fixtures next to this file.
set(_runner_testdata ${CMAKE_CURRENT_SOURCE_DIR}/testdata)
set(_runner_out ${CMAKE_CURRENT_BINARY_DIR}/cli_test_out)
# Every results.json these tests expect is validated against the shipped schema too, by the
# pinned jsonschema of the tests' environment (cmake/MeshgatePythonTests.cmake).
set(_schema_check -DPYTHON=${MESHGATE_TEST_PYTHON} -DHARNESS=${PROJECT_SOURCE_DIR}/harness)

function(meshgate_runner_cli_test name code)
  cmake_parse_arguments(ARG "" "STDERR;STDOUT;FILE;FILE_MATCHES" "ARGS" ${ARGN})
  # add_test splits arguments at ';', so the runner's arguments travel joined by '|'.
  list(JOIN ARG_ARGS "|" _args)
  set(_defs -DRUNNER=$<TARGET_FILE:meshgate-runner> "-DARGS=${_args}" -DEXPECT_CODE=${code}
            ${_schema_check})
  foreach(_what STDERR STDOUT FILE FILE_MATCHES)
    if(DEFINED ARG_${_what})
      list(APPEND _defs "-DEXPECT_${_what}=${ARG_${_what}}")
    endif()
  endforeach()
  add_test(NAME runner_cli_${name} COMMAND ${CMAKE_COMMAND} ${_defs} -P ${_runner_testdata}/check_run.cmake)
  set_tests_properties(runner_cli_${name} PROPERTIES LABELS cpp FIXTURES_REQUIRED python_envs)
endfunction()

meshgate_runner_cli_test(typo_is_an_input_error 2
  ARGS run ${_runner_testdata}/typo.yaml --out ${_runner_out}/typo
  STDERR "typo\\.yaml:7:5: case 'typo/coalesce-ok': key 'exepct': unknown key \\(did you mean 'expect'\\?\\)")
meshgate_runner_cli_test(smoke_passes 0
  ARGS run ${_runner_testdata}/smoke.yaml --out ${_runner_out}/smoke --run-id cli-smoke
  STDOUT "\\[1/5\\] pass   runner-smoke/coalesce-row-major.*5 cases: 5 pass, 0 fail, 0 error, 0 skip"
  FILE ${_runner_out}/smoke/results.json
  FILE_MATCHES "\"schema\": \"meshgate.results/1\".*\"id\": \"runner-smoke/size-8\".*\"time_s\": \\[\n +\\[")
meshgate_runner_cli_test(wrong_answer_fails 1
  ARGS run ${_runner_testdata}/wrong.yaml --out ${_runner_out}/wrong
  STDOUT "fail   runner-wrong/coalesce-wrong-expectation")
meshgate_runner_cli_test(progress_events 0
  ARGS run ${_runner_testdata}/smoke.yaml --tag perf --progress --out ${_runner_out}/progress
  STDOUT "^\\{\"event\":\"plan\",\"total\":1,\"ids\":\\[\"runner-smoke/coalesce-timed\"\\]\\}\n\\{\"event\":\"start\",\"id\":\"runner-smoke/coalesce-timed\",\"kind\":\"layout\",\"index\":1,\"total\":1,.*\\{\"event\":\"done\",\"exit_code\":0,\"counts\":\\{\"pass\":1,\"fail\":0,\"error\":0,\"skip\":0\\}\\}\n$")
meshgate_runner_cli_test(bad_cpu_list_is_a_usage_error 2
  ARGS run ${_runner_testdata}/smoke.yaml --cpus 1-0 --out ${_runner_out}/bad-cpus
  STDERR "--cpus: expects a CPU list such as 0, 0-3 or 0,2 .*got '1-0'")
meshgate_runner_cli_test(list_json 0
  ARGS list ${_runner_testdata}/smoke.yaml --case "runner-smoke/size-*" --json
  STDOUT "\"id\": \"runner-smoke/size-4\".*\"id\": \"runner-smoke/size-8\"")
# Hostile case files: each one stops the runner with exit code 2 and a message naming the file
# and line, within seconds (the self-alias crashed the runner, the others ran for minutes or
# exhausted memory).
set(_hostile ${_runner_testdata}/hostile)
foreach(_case
    "self-alias|self-alias\\.yaml:8:22: alias '\\*x' refers to the anchor '&x' at line 8 that contains it"
    "alias-bomb|alias-bomb\\.yaml:9:[0-9]+: alias '\\*a4' brings the YAML nodes that aliases add to the file past 100000"
    "matrix-8x10|matrix-8x10\\.yaml:10:7: case 'hostile/m-[^']*': key 'matrix': expands to .* = 100000000 combinations, above the limit of 10000 per case"
    "duplicate-key|duplicate-key\\.yaml:7:5: key 'op': defined twice in this mapping, first at line 6"
    "two-documents|two-documents\\.yaml:7:1: a second YAML document starts here"
    "control-name|control-name\\.yaml:4:11: a string holds the control character U\\+001B"
    "utf16|utf16\\.yaml: the file is encoded as UTF-16 \\(little-endian, with a byte-order mark\\)")
  string(REPLACE "|" ";" _case "${_case}")
  list(GET _case 0 _name)
  list(GET _case 1 _expected)
  meshgate_runner_cli_test(hostile_${_name} 2
    ARGS run ${_hostile}/${_name}.yaml --out ${_runner_out}/hostile
    STDERR "^[^\n]*/hostile/${_expected}[^\n]*\n1 input error")
  set_tests_properties(runner_cli_hostile_${_name} PROPERTIES TIMEOUT 10)
endforeach()
# Programs as cases: the smoke suite of cases/command passes, and every way a program can go
# wrong is an error or fail row naming the rank, with the cases after it still run.
meshgate_runner_cli_test(command_cases_pass 0
  ARGS run ${PROJECT_SOURCE_DIR}/cases/command --out ${_runner_out}/command --run-id cli-command
  STDOUT "pass   command-smoke/ranks-meet-4.*pass   command-smoke/python-timed.*3 cases: 3 pass, 0 fail, 0 error, 0 skip"
  FILE ${_runner_out}/command/results.json
  FILE_MATCHES "\"kind\": \"command\".*\"plan\": \\[\n +\"sum = 49995000\".*\"time_s\": \\[\n +\\[")
meshgate_runner_cli_test(command_failures_are_rows_of_their_own 2
  ARGS run ${_runner_testdata}/command-failures.yaml --out ${_runner_out}/command-failures
  STDOUT "error  runner-command/rank-exits-non-zero.*rank 2: exited with 4; its stderr ended with:\n +cannot reach 127\\.0\\.0\\.1.*fail   runner-command/rank-reports-fail[^\n]*\n +rank 1: checked rank 1\n.*error  runner-command/no-result[^\n]*\n +rank 0: exited with 0 without writing its result.*error  runner-command/malformed-result[^\n]*\n +rank 0: wrote a result to \\$MESHGATE_RESULT that is not valid JSON.*error  runner-command/hangs-past-its-timeout[^\n]*\n +rank 0: timed out after 0\\.5 s.*pass   runner-command/still-runs-after-them.*6 cases: 1 pass, 1 fail, 4 error, 0 skip"
  FILE ${_runner_out}/command-failures/results.json)
set_tests_properties(runner_cli_command_failures_are_rows_of_their_own PROPERTIES TIMEOUT 20)

# A generated file of 10 000 written-out mesh cases with full expectations (over 600 000 YAML
# nodes, no aliases) loads and runs: only what aliases add counts against the alias limit.
foreach(_command list run)
  set(_generated ${_runner_out}/generated-${_command}.yaml)
  if(_command STREQUAL "list")
    set(_args list|${_generated})
    set(_expect "generated-mesh/gen-00000-8 +mesh\n.*generated-mesh/gen-09999-2 +mesh\n$")
  else()
    set(_args run|${_generated}|--out|${_runner_out}/generated)
    set(_expect "10000 cases: 10000 pass, 0 fail, 0 error, 0 skip")
  endif()
  add_test(NAME runner_cli_generated_10000_cases_${_command}
           COMMAND ${CMAKE_COMMAND} -DPYTHON=${MESHGATE_TEST_PYTHON}
                   -DGENERATOR=${_runner_testdata}/generate_mesh_cases.py -DCOUNT=10000
                   -DCASE_FILE=${_generated} -DRUNNER=$<TARGET_FILE:meshgate-runner>
                   "-DARGS=${_args}" -DEXPECT_CODE=0 "-DEXPECT_STDOUT=${_expect}"
                   -P ${_runner_testdata}/generated_cases.cmake)
  set_tests_properties(runner_cli_generated_10000_cases_${_command} PROPERTIES
    LABELS cpp TIMEOUT 120 FIXTURES_REQUIRED python_envs)
endforeach()

meshgate_runner_cli_test(unknown_option 2
  ARGS run ${_runner_testdata}/smoke.yaml --rank 4
  STDERR "unknown option '--rank' for run \\(did you mean '--ranks'\\?\\)")

# The collectives end to end under mpirun with 4 processes (CI runs this as root, hence the
# Open MPI variables and flags that allow it; --oversubscribe for machines with fewer cores).
# As for lib/comm's MPI tests: not under TSan (Open MPI's own threads report there), and under
# ASan without the leak check (Open MPI's plugins never free some of their memory).
if(MPI_CXX_FOUND AND MPIEXEC_EXECUTABLE AND NOT MESHGATE_SANITIZE MATCHES "thread")
  set(_mpi_args -np 4 --oversubscribe --allow-run-as-root $<TARGET_FILE:meshgate-runner> run
      ${_runner_testdata}/collectives-mpi.yaml --backend mpi --out ${_runner_out}/mpi
      --run-id cli-mpi --case-timeout 120)
  list(JOIN _mpi_args "|" _mpi_args)
  add_test(NAME runner_cli_mpi_collectives
           COMMAND ${CMAKE_COMMAND} -DRUNNER=${MPIEXEC_EXECUTABLE} "-DARGS=${_mpi_args}"
                   -DEXPECT_CODE=0
                   "-DEXPECT_STDOUT=\\[1/7\\] pass   runner-mpi/all-reduce-sum.*busbw.*\\[6/7\\] pass   runner-mpi/integer-avg-rejected.*\\[7/7\\] skip   runner-mpi/needs-eight-ranks.*7 cases: 6 pass, 0 fail, 0 error, 1 skip"
                   -DEXPECT_FILE=${_runner_out}/mpi/results.json ${_schema_check}
                   "-DEXPECT_FILE_MATCHES=\"backend\": \"mpi\".*\"world_size\": 4.*\"mpi\": \"Open MPI"
                   -P ${_runner_testdata}/check_run.cmake)
  set(_mpi_env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
  if(MESHGATE_SANITIZE MATCHES "address")
    list(APPEND _mpi_env ASAN_OPTIONS=detect_leaks=0)
  endif()
  set_tests_properties(runner_cli_mpi_collectives PROPERTIES
    ENVIRONMENT "${_mpi_env}" LABELS "cpp;mpi" TIMEOUT 300)
  # Command cases under mpirun: each runner process starts the program of its own rank.
  set(_mpi_args -np 4 --oversubscribe --allow-run-as-root $<TARGET_FILE:meshgate-runner> run
      ${PROJECT_SOURCE_DIR}/cases/command ${_runner_testdata}/command-failures.yaml
      --backend mpi --out ${_runner_out}/mpi-command --run-id cli-mpi-command --case-timeout 60)
  list(JOIN _mpi_args "|" _mpi_args)
  add_test(NAME runner_cli_mpi_command
           COMMAND ${CMAKE_COMMAND} -DRUNNER=${MPIEXEC_EXECUTABLE} "-DARGS=${_mpi_args}"
                   -DEXPECT_CODE=2
                   "-DEXPECT_STDOUT=pass   command-smoke/ranks-meet-4.*pass   command-smoke/python-timed.*rank 2: exited with 4.*fail   runner-command/rank-reports-fail[^\n]*\n +rank 1: checked rank 1\n.*pass   runner-command/still-runs-after-them.*9 cases: 4 pass, 1 fail, 4 error, 0 skip"
                   -DEXPECT_FILE=${_runner_out}/mpi-command/results.json ${_schema_check}
                   "-DEXPECT_FILE_MATCHES=\"backend\": \"mpi\""
                   -P ${_runner_testdata}/check_run.cmake)
  set_tests_properties(runner_cli_mpi_command PROPERTIES
    ENVIRONMENT "${_mpi_env}" LABELS "cpp;mpi" TIMEOUT 120)
endif()

# PyTorch's plans of cases/redistribute/upstream-bugs.yaml, replayed with `steps`, do exactly
# the damage their cases expect, and meshgate's plans of the same redistributions are right.
meshgate_runner_cli_test(upstream_bug_plans_corrupt_as_expected 0
  ARGS run ${PROJECT_SOURCE_DIR}/cases/redistribute/upstream-bugs.yaml --out ${_runner_out}/upstream
  STDOUT "pass   redistribute-upstream-bugs/rs-after-chunk-pytorch.*6 cases: 6 pass, 0 fail")

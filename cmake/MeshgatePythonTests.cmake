# The Python test suites run in the virtual environments that ci/bootstrap makes from the pins of
# pyproject.toml (ci/python_envs.py: build/venv/main for the python3 on PATH, build/venv/oldest
# for the oldest supported Python), never in an interpreter's own site-packages. Each suite:
# - runs that environment's interpreter, with the environment first on PATH (so a script's
#   `#!/usr/bin/env python3` and a bare `python3` are that interpreter too);
# - has the import guard on (MESHGATE_HERMETIC): importing from another site-packages, or
#   starting an interpreter that is not an isolated environment, fails and is logged;
# - requires the fixture python_envs: `python_envs` first checks every environment against
#   its pins, lock and guard (and empties the log), `python_envs_clean` fails at the end on
#   any logged violation, which catches a test that swallowed the guard's exception.

set(MESHGATE_TEST_VENVS "${PROJECT_SOURCE_DIR}/build/venv" CACHE PATH
    "The test suites' Python environments (ci/python_envs.py makes them)")
set(MESHGATE_TEST_PYTHON "${MESHGATE_TEST_VENVS}/main/bin/python")
set(MESHGATE_TEST_PYTHON_OLDEST "${MESHGATE_TEST_VENVS}/oldest/bin/python")
set(_meshgate_hermetic_log "${PROJECT_BINARY_DIR}/python-envs/violations.log")

if(NOT EXISTS "${MESHGATE_TEST_PYTHON}")
  message(STATUS "meshgate: no ${MESHGATE_TEST_PYTHON}: run ci/bootstrap before the Python tests")
endif()

if(NOT TEST python_envs)
  add_test(NAME python_envs
           COMMAND ${MESHGATE_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/ci/python_envs.py check
                   --reset-log ${_meshgate_hermetic_log})
  add_test(NAME python_envs_clean
           COMMAND ${MESHGATE_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/ci/python_envs.py violations
                   ${_meshgate_hermetic_log})
  set_tests_properties(python_envs PROPERTIES FIXTURES_SETUP python_envs LABELS python TIMEOUT 300)
  set_tests_properties(python_envs_clean PROPERTIES FIXTURES_CLEANUP python_envs LABELS python)
endif()

# meshgate_add_python_test(NAME COMMAND args... [OLDEST] [WORKING_DIRECTORY dir]
#                          [ENVIRONMENT VAR=value...] [LABELS l...] [TIMEOUT s])
# COMMAND's arguments follow the interpreter: `COMMAND -m unittest ...` runs
# `<environment>/bin/python -m unittest ...`. OLDEST runs it in the oldest Python's environment.
function(meshgate_add_python_test name)
  cmake_parse_arguments(ARG "OLDEST" "WORKING_DIRECTORY;TIMEOUT" "COMMAND;ENVIRONMENT;LABELS" ${ARGN})
  if(ARG_OLDEST)
    set(_venv "${MESHGATE_TEST_VENVS}/oldest")
  else()
    set(_venv "${MESHGATE_TEST_VENVS}/main")
  endif()
  set(_args)
  if(ARG_WORKING_DIRECTORY)
    set(_args WORKING_DIRECTORY ${ARG_WORKING_DIRECTORY})
  endif()
  add_test(NAME ${name} COMMAND ${_venv}/bin/python ${ARG_COMMAND} ${_args})
  list(PREPEND ARG_LABELS python)
  set(_env "PATH=${_venv}/bin:$ENV{PATH}" "VIRTUAL_ENV=${_venv}" "PYTHONNOUSERSITE=1"
           "MESHGATE_HERMETIC=${_meshgate_hermetic_log}" ${ARG_ENVIRONMENT})
  # A PYTHONPATH or PYTHONHOME of the developer's would add packages the pins do not make.
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${_env}" FIXTURES_REQUIRED python_envs
                       ENVIRONMENT_MODIFICATION "PYTHONPATH=unset:;PYTHONHOME=unset:"
                       LABELS "${ARG_LABELS}")
  if(ARG_TIMEOUT)
    set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  endif()
endfunction()

# Flags every meshgate target shares, carried by one interface target instead of global flags.
add_library(meshgate_build_options INTERFACE)
add_library(meshgate::build_options ALIAS meshgate_build_options)
target_compile_features(meshgate_build_options INTERFACE cxx_std_20)
target_compile_options(meshgate_build_options INTERFACE
  $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor>)

# Fuzzing instruments every target for libFuzzer's coverage feedback and runs it under ASan and
# UBSan, so that a bug deep in lib/ is found as well as one in the code a fuzz target calls.
if(MESHGATE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "MESHGATE_FUZZ needs clang's libFuzzer but the C++ compiler is "
                        "${CMAKE_CXX_COMPILER_ID}: configure with `cmake --preset fuzz` (clang++-14; "
                        "ci/bootstrap installs clang-14 and libclang-rt-14-dev)")
  endif()
  if(MESHGATE_SANITIZE STREQUAL "")
    set(MESHGATE_SANITIZE "address,undefined")
  elseif(NOT MESHGATE_SANITIZE STREQUAL "address,undefined")
    message(FATAL_ERROR "MESHGATE_FUZZ runs under 'address,undefined', not MESHGATE_SANITIZE='${MESHGATE_SANITIZE}'")
  endif()
  target_compile_options(meshgate_build_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()

if(MESHGATE_SANITIZE)
  set(_meshgate_san_flags -fsanitize=${MESHGATE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_compile_options(meshgate_build_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_meshgate_san_flags}>)
  target_link_options(meshgate_build_options INTERFACE ${_meshgate_san_flags})
endif()

# meshgate_add_test(NAME SOURCES... LIBS ...): one GoogleTest binary registered with CTest.
function(meshgate_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main meshgate::build_options)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS cpp)
endfunction()

# meshgate_add_benchmark(NAME SOURCES... LIBS ...): one Google Benchmark binary (not a test).
function(meshgate_add_benchmark name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} benchmark::benchmark benchmark::benchmark_main meshgate::build_options)
endfunction()

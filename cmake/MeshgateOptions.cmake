# Flags every meshgate target shares, carried by one interface target instead of global flags.
add_library(meshgate_build_options INTERFACE)
add_library(meshgate::build_options ALIAS meshgate_build_options)
target_compile_features(meshgate_build_options INTERFACE cxx_std_20)
target_compile_options(meshgate_build_options INTERFACE
  $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor>)

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

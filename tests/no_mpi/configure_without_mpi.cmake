# The project configures without MPI (TAPEGRAD_WITH_MPI=OFF, as on a machine without
# libopenmpi-dev) with its tests and examples, and the option is what it says. What the build
# compiles differently without MPI is framework/dist.cpp alone: tests/CMakeLists.txt builds the
# dist tests against that compile of it (dist_tests_without_mpi).
# Arguments: -DSOURCE_DIR= -DWORK_DIR= -DCXX=
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR} -DCMAKE_BUILD_TYPE=Release
                  -DCMAKE_CXX_COMPILER=${CXX} -DTAPEGRAD_WITH_MPI=OFF -DTAPEGRAD_BUILD_TESTS=ON
                  -DTAPEGRAD_BUILD_EXAMPLES=ON -DTAPEGRAD_BUILD_BENCH=OFF
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring without MPI failed (${rc}):\n${out}\n${err}")
endif()
file(STRINGS ${WORK_DIR}/CMakeCache.txt with_mpi REGEX "^TAPEGRAD_WITH_MPI:")
file(REMOVE_RECURSE ${WORK_DIR})
if(NOT with_mpi STREQUAL "TAPEGRAD_WITH_MPI:BOOL=OFF")
  message(FATAL_ERROR "expected TAPEGRAD_WITH_MPI:BOOL=OFF, got '${with_mpi}'")
endif()

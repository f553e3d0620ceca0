# Installs the build tree into a temporary prefix, then configures, builds and runs the
# consumer project against it. Any failing step fails the test.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
# The library's private headers (folders named internal/) are left out of the install (README),
# while the public ones are there.
file(GLOB_RECURSE installed_headers ${WORK_DIR}/prefix/include/*)
set(installed_internal ${installed_headers})
list(FILTER installed_internal INCLUDE REGEX "/internal/")
if(installed_internal)
  message(FATAL_ERROR "private headers were installed: ${installed_internal}")
endif()
if(NOT EXISTS ${WORK_DIR}/prefix/include/tapegrad/tapegrad.h OR NOT EXISTS ${WORK_DIR}/prefix/include/tapegrad/ops/conv/conv.h)
  message(FATAL_ERROR "public headers missing from the install in ${WORK_DIR}/prefix/include/tapegrad")
endif()
step(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
     -DCMAKE_BUILD_TYPE=Release)
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step(${WORK_DIR}/build/consumer)

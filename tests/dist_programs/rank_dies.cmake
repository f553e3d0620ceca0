# A rank that dies makes the whole job stop within seconds (the README's claim: 30 s allowed here,
# about 1 s taken on an idle 2-core machine, mpirun's launch included), with a message naming it,
# and the last checkpoint stays loadable. Arguments: -DMPIEXEC=... -DPROGRAM=... -DWORK_DIR=...
file(MAKE_DIRECTORY ${WORK_DIR})
set(checkpoint ${WORK_DIR}/checkpoint.safetensors)
file(REMOVE ${checkpoint})
string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${MPIEXEC} -np 2 --oversubscribe --bind-to none ${PROGRAM} ${checkpoint}
  TIMEOUT 30 RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
message(STATUS "mpirun ended after ${seconds} s with status '${status}'")
if(status EQUAL 0 OR status MATCHES "timeout")
  message(FATAL_ERROR "expected the job to fail within 30 s after rank 1 died, got status '${status}':\n${out}\n${err}")
endif()
if(NOT "${out}${err}" MATCHES "rank 1")
  message(FATAL_ERROR "expected a message naming rank 1, got:\n${out}\n${err}")
endif()
execute_process(COMMAND ${PROGRAM} --check ${checkpoint} RESULT_VARIABLE loads OUTPUT_VARIABLE check_out ERROR_VARIABLE check_err)
if(NOT loads EQUAL 0)
  message(FATAL_ERROR "the checkpoint written before the failure does not load:\n${check_out}\n${check_err}")
endif()

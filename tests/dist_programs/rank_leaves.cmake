# A rank that returns from main while the others wait in a collective ends the job within seconds
# (30 s allowed, mpirun's launch included), rank 0 naming rank 1 as it ends it; a run where every
# rank finishes, rank 0 two seconds after rank 1, ends cleanly.
# Arguments: -DMPIEXEC=... -DPROGRAM=...
execute_process(
  COMMAND ${MPIEXEC} -np 2 --oversubscribe --bind-to none ${PROGRAM}
  TIMEOUT 30 RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "mpirun ended with status '${status}'")
if(status EQUAL 0 OR status MATCHES "timeout")
  message(FATAL_ERROR "expected the job to fail within 30 s after rank 1 returned, got status '${status}':\n${out}\n${err}")
endif()
if(NOT "${err}" MATCHES "tg::dist::all_reduce_async: rank 1 left the job before this collective.*rank 0 ends the job")
  message(FATAL_ERROR "expected rank 0's message naming rank 1, got:\n${out}\n${err}")
endif()
execute_process(
  COMMAND ${MPIEXEC} -np 2 --oversubscribe --bind-to none ${PROGRAM} --late
  TIMEOUT 30 RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0 OR NOT "${out}" MATCHES "rank 0 finished" OR NOT "${out}" MATCHES "rank 1 finished")
  message(FATAL_ERROR "expected both ranks to finish, got status '${status}':\n${out}\n${err}")
endif()

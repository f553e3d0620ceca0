# Runs a program that must refuse what it is given: it must exit with a non-zero status and
# print (on stdout or stderr) text matching PATTERN. ctest's PASS_REGULAR_EXPRESSION alone
# ignores the exit status, and a refusal that exits 0 is the bug some of these tests guard.
#
#   cmake -DPATTERN=<regex> -P expect_refusal.cmake -- <program> [args...]
set(command)
set(after_separator FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_separator)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" STREQUAL "--")
    set(after_separator TRUE)
  endif()
endforeach()
if(NOT command OR NOT DEFINED PATTERN)
  message(FATAL_ERROR "usage: cmake -DPATTERN=<regex> -P expect_refusal.cmake -- <program> [args...]")
endif()
execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if("${status}" STREQUAL "0")
  message(FATAL_ERROR "expected a non-zero exit status, got 0")
endif()
if(NOT "${out}${err}" MATCHES "${PATTERN}")
  message(FATAL_ERROR "exit status ${status}, but the output does not match: ${PATTERN}")
endif()

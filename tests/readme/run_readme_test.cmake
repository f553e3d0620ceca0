# The test readme_blocks: builds the target readme_blocks (every ```cpp block of README.md, one
# translation unit each, see readme_blocks.cmake) and, when that fails, names the README lines
# of the blocks that did not compile or link.
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target readme_blocks --parallel ${JOBS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  set(log "${out}\n${err}")
  # Compiler diagnostics carry README.md:<line> (the generated files' #line), and make / ninja
  # name the failing file readme_line_<fence line>.cpp.
  string(REGEX MATCHALL "README\\.md:[0-9]+" at "${log}")
  # (Only the lines that report a failure: the build log names every block it built.)
  string(REGEX MATCHALL "[^\n]*(Error|FAILED|error)[^\n]*readme_line_[0-9]+|[^\n]*readme_line_[0-9]+[^\n]*(Error|FAILED|error)" failed "${log}")
  string(REGEX MATCHALL "readme_line_[0-9]+" files "${failed}")
  string(REGEX MATCHALL "readme_block_at_line_[0-9]+" symbols "${log}")
  list(REMOVE_DUPLICATES at)
  list(REMOVE_DUPLICATES files)
  list(REMOVE_DUPLICATES symbols)
  string(REPLACE ";" ", " at "${at}")
  string(REPLACE ";" ", " files "${files}")
  string(REPLACE ";" ", " symbols "${symbols}")
  message(FATAL_ERROR "README.md: a ```cpp block does not compile or link.\n"
    "  errors at: ${at}\n  blocks (by the line of their fence): ${files} ${symbols}\n"
    "  (tests/readme/readme_blocks.cmake says what a block may assume)\n\n${log}")
endif()
message(STATUS "every ```cpp block of README.md compiles")

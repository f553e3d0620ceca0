# Every ```cpp block of README.md compiles: this file (included by tests/CMakeLists.txt at
# configure time) cuts README.md into one translation unit per block, and the test readme_blocks
# (tests/readme/run_readme_test.cmake) builds them all, in parallel, with the build's compiler.
#
# The convention a README block follows:
#   - Only blocks fenced ```cpp are compiled. Text that is deliberately not C++ (a shell line,
#     program output, a CMake snippet, pseudo-code) takes another tag (sh, text, cmake, ...).
#   - A block containing `int main(` is a whole program: compiled as written, linked against
#     tapegrad (its own executable, never run). It includes what it uses.
#   - Any other block is a fragment: the body of a function, compiled after
#         #include <tapegrad/tapegrad.h>
#         #include <iostream>
#         using namespace tg;
#     and with these names in scope, as the function's parameters (a fragment may use them
#     without declaring them, or declare its own of the same names: it is compiled in a nested
#     block; it declares everything else it uses):
#         tg::Tensor x, y, w, b, v;   // an input, labels, a weight, a bias, a direction
#         tg::Module& model;
#         tg::Optimizer& opt;
#     A fragment may define local classes (a `struct Net : tg::Module`) and lambdas, but no
#     #include, function, template or namespace-scope declaration: write a whole program then.
#     The fragments are linked together into one executable (never run), so a README call of a
#     function that is declared but not defined fails too.
#   - Errors name the README's lines: each generated file starts its block with
#     `#line <README line> "README.md"`, and its name is readme_line_<N>.cpp (N: the fence's line).

# Writes the blocks of `readme` into `out_dir`; sets `programs` (whole-program files) and
# `fragments` (fragment files) in the caller's scope.
function(tapegrad_readme_blocks readme out_dir programs fragments)
  file(READ ${readme} text)
  file(MAKE_DIRECTORY ${out_dir})
  set(program_files "")
  set(fragment_files "")
  set(line 1)  # the README line at which `text` starts
  while(TRUE)
    # The next fence opening a line: "```cpp" then the end of the line.
    string(FIND "${text}" "```cpp\n" at)
    if(at EQUAL -1)
      break()
    endif()
    string(SUBSTRING "${text}" 0 ${at} before)
    if(NOT at EQUAL 0 AND NOT before MATCHES "\n$")  # not at a line start: skip past it
      math(EXPR skip "${at} + 7")
      string(REGEX MATCHALL "\n" nl "${before}")
      list(LENGTH nl n)
      math(EXPR line "${line} + ${n} + 1")
      string(SUBSTRING "${text}" ${skip} -1 text)
      continue()
    endif()
    string(REGEX MATCHALL "\n" nl "${before}")
    list(LENGTH nl n)
    math(EXPR fence_line "${line} + ${n}")
    math(EXPR body_start "${at} + 7")
    string(SUBSTRING "${text}" ${body_start} -1 text)
    string(FIND "${text}" "\n```" end)
    if(end EQUAL -1)
      message(FATAL_ERROR "${readme}:${fence_line}: the ```cpp block opened here is never closed")
    endif()
    math(EXPR end_with_newline "${end} + 1")
    string(SUBSTRING "${text}" 0 ${end_with_newline} body)
    string(SUBSTRING "${text}" ${end_with_newline} -1 text)
    string(REGEX MATCHALL "\n" nl "${body}")
    list(LENGTH nl n)
    math(EXPR line "${fence_line} + 1 + ${n}")
    math(EXPR first_line "${fence_line} + 1")
    set(file ${out_dir}/readme_line_${fence_line}.cpp)
    if(body MATCHES "int main\\(")
      set(content "#line ${first_line} \"README.md\"\n${body}")
      list(APPEND program_files ${file})
    else()
      string(CONCAT content
        "// README.md, the block at line ${fence_line} (a fragment; see tests/readme/readme_blocks.cmake)\n"
        "#include <tapegrad/tapegrad.h>\n#include <iostream>\nusing namespace tg;\n"
        "void readme_block_at_line_${fence_line}([[maybe_unused]] tg::Tensor x, [[maybe_unused]] tg::Tensor y,\n"
        "    [[maybe_unused]] tg::Tensor w, [[maybe_unused]] tg::Tensor b, [[maybe_unused]] tg::Tensor v,\n"
        "    [[maybe_unused]] tg::Module& model, [[maybe_unused]] tg::Optimizer& opt) { {\n"
        "#line ${first_line} \"README.md\"\n${body}} }\n")
      list(APPEND fragment_files ${file})
    endif()
    _tapegrad_write_if_changed(${file} content)
  endwhile()
  set(${programs} ${program_files} PARENT_SCOPE)
  set(${fragments} ${fragment_files} PARENT_SCOPE)
endfunction()

# Rewrites `file` only when its content changes, so that a reconfigure recompiles only the
# blocks that changed. `content_var` names the variable holding the text (a block has semicolons,
# which an argument list would split).
function(_tapegrad_write_if_changed file content_var)
  set(content "${${content_var}}")
  if(EXISTS ${file})
    file(READ ${file} old)
    if(old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE ${file} "${content}")
endfunction()

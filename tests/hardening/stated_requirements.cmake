# gpusel's requirements fail in one sentence each (include/gpusel/error.hpp):
# a file that includes gpusel under -fno-exceptions, or for a target that is not
# Linux (__linux__ undefined), stops with gpusel's #error as the first error, and
# stops there: the only other error is the line of the include that ends the
# compilation, nothing from the headers after it. Each compiler of COMPILERS
# (g++ or clang++, and nvcc, which takes the flag with -Xcompiler) is tried.
#
#   cmake -DCOMPILERS="c++;clang++;nvcc" -DINCLUDE_DIR=... -DCUDA_INCLUDE_DIR=... -DWORK_DIR=... -P stated_requirements.cmake
cmake_minimum_required(VERSION 3.21)
file(MAKE_DIRECTORY "${WORK_DIR}")
set(unit "${WORK_DIR}/requirements.cpp")
file(WRITE "${unit}" "#include \"gpusel/gpusel.hpp\"\n")
set(stop "gpusel stops here: the #error above says why")
set(failures "")

# The compiler's output for `flag` (a compilation that must fail) in `output_var`.
function(compile_with compiler flag output_var)
  get_filename_component(name "${compiler}" NAME)
  if(name MATCHES "nvcc")
    set(command "${compiler}" -std=c++17 -x cu -Xcompiler ${flag} -c "${unit}" -o "${WORK_DIR}/requirements.o")
  else()
    set(command "${compiler}" -std=c++17 -fsyntax-only ${flag} "${unit}")
  endif()
  execute_process(COMMAND ${command} "-I${INCLUDE_DIR}" "-I${CUDA_INCLUDE_DIR}"
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(result EQUAL 0)
    set(output "")
  endif()
  set(${output_var} "${output}" PARENT_SCOPE)
endfunction()

foreach(compiler IN LISTS COMPILERS)
  foreach(case IN ITEMS
      "-fno-exceptions|gpusel needs C++ exceptions (every failure is a thrown gpusel::Error): compile without -fno-exceptions"
      "-U__linux__|gpusel supports Linux only: it loads NVML with dlopen, leases GPUs with flock and needs POSIX threads")
    string(REPLACE "|" ";" case "${case}")
    list(GET case 0 flag)
    list(GET case 1 sentence)
    compile_with("${compiler}" "${flag}" output)
    set(with "${compiler} ${flag}")
    if(output STREQUAL "")
      string(APPEND failures "with ${with}, gpusel.hpp compiles; it should stop and say why\n")
      continue()
    endif()
    # Every diagnostic that is an error, one a line: file:line:column: [fatal ]error: text (';' would split it).
    string(REPLACE ";" "," output "${output}")
    string(REGEX MATCHALL "[^\n]*:[0-9]+:[0-9]+: (fatal )?error:[^\n]*" errors "${output}")
    list(LENGTH errors count)
    set(first "")
    set(second "")
    if(count GREATER_EQUAL 1)
      list(GET errors 0 first)
    endif()
    if(count GREATER_EQUAL 2)
      list(GET errors 1 second)
    endif()
    if(NOT first MATCHES "error\\.hpp:[0-9]+:[0-9]+: error: (#error )?\"(.*)\"$" OR NOT CMAKE_MATCH_2 STREQUAL sentence)
      string(APPEND failures "with ${with}, the first error is not gpusel's sentence \"${sentence}\":\n${first}\n")
    elseif(NOT count EQUAL 2 OR NOT second MATCHES "error\\.hpp:[0-9]+:[0-9]+: fatal error: '?${stop}")
      string(APPEND failures "with ${with}, ${count} errors, not gpusel's sentence and the include that stops:\n")
      foreach(error IN LISTS errors)
        string(APPEND failures "  ${error}\n")
      endforeach()
    else()
      message(STATUS "${with}: ${first}")
    endif()
  endforeach()
endforeach()
if(failures)
  message(FATAL_ERROR "${failures}")
endif()

# gpusel's requirements fail in one sentence each (include/gpusel/error.hpp):
# a file that includes gpusel under -fno-exceptions, or for a target that is not
# Linux (__linux__ undefined), stops with gpusel's #error as the first error.
#
#   cmake -DCXX=... -DINCLUDE_DIR=... -DCUDA_INCLUDE_DIR=... -DWORK_DIR=... -P stated_requirements.cmake
cmake_minimum_required(VERSION 3.21)
file(MAKE_DIRECTORY "${WORK_DIR}")
set(unit "${WORK_DIR}/requirements.cpp")
file(WRITE "${unit}" "#include \"gpusel/gpusel.hpp\"\n")
set(failures "")
foreach(case IN ITEMS
    "-fno-exceptions|gpusel needs C++ exceptions (every failure is a thrown gpusel::Error): compile without -fno-exceptions"
    "-U__linux__|gpusel supports Linux only: it loads NVML with dlopen, leases GPUs with flock and needs POSIX threads")
  string(REPLACE "|" ";" case "${case}")
  list(GET case 0 flag)
  list(GET case 1 sentence)
  execute_process(COMMAND "${CXX}" -std=c++17 -fsyntax-only ${flag} "-I${INCLUDE_DIR}" "-I${CUDA_INCLUDE_DIR}" "${unit}"
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  string(REGEX MATCH "[^\n]*error:[^\n]*" first_error "${output}")
  if(result EQUAL 0)
    string(APPEND failures "with ${flag}, gpusel.hpp compiles; it should stop and say why\n")
  elseif(NOT first_error MATCHES "error\\.hpp:[0-9]+:[0-9]+: error: (#error )?\"(.*)\"$"
         OR NOT CMAKE_MATCH_2 STREQUAL sentence)
    string(APPEND failures "with ${flag}, the first error is not gpusel's sentence \"${sentence}\":\n${first_error}\n")
  else()
    message(STATUS "${flag}: ${first_error}")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "${failures}")
endif()

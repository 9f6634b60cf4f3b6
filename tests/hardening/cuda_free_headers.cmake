# Compiles each header in HEADERS (a ;-list, relative to INCLUDE_DIR) with only
# INCLUDE_DIR on the include path, and fails if one cannot, or if one opens a
# CUDA or NVML header (found on the default path, e.g. Debian's
# nvidia-cuda-toolkit puts them in /usr/include).
# tests/hardening/layers.py --list gives the list: every core and machine
# header, and every header that says "This header includes no CUDA header".
cmake_minimum_required(VERSION 3.21)
string(REPLACE "," ";" HEADERS "${HEADERS}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(failures "")
foreach(header IN LISTS HEADERS)
  if(NOT EXISTS "${INCLUDE_DIR}/${header}")
    list(APPEND failures "${header}: listed as CUDA-free but does not exist (remove it from the list?)")
    continue()
  endif()
  string(MAKE_C_IDENTIFIER "${header}" name)
  set(unit "${WORK_DIR}/${name}.cpp")
  file(WRITE "${unit}" "#include \"${header}\"\n")
  # -H lists every header opened, one per line, on stderr.
  execute_process(COMMAND "${CXX}" -std=c++17 -fsyntax-only -H "-I${INCLUDE_DIR}" "${unit}"
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    list(APPEND failures "${header}: does not compile without a CUDA include path:\n${output}")
    continue()
  endif()
  string(REGEX MATCHALL "[^\n]*/(cuda[A-Za-z0-9_]*|driver_types|vector_types|nvml)\\.h(\n|$)" cuda_headers "${output}")
  if(cuda_headers)
    list(APPEND failures "${header}: opens CUDA headers: ${cuda_headers}")
  endif()
endforeach()
if(failures)
  string(REPLACE ";" "\n" failures "${failures}")
  message(FATAL_ERROR "headers that must need no CUDA:\n${failures}")
endif()
list(LENGTH HEADERS count)
message(STATUS "${count} headers compile with no CUDA include path and open no CUDA header")

# Compiles the headers in HEADERS (a ;-list, relative to INCLUDE_DIR) with only
# INCLUDE_DIR on the include path, and fails if they cannot, or if one opens a
# CUDA or NVML header (found on the default path, e.g. Debian's
# nvidia-cuda-toolkit puts them in /usr/include), naming the includes that led there.
# tests/hardening/layers.py --list gives the list: every core and machine
# header, and every header that says "This header includes no CUDA header".
# One translation unit includes them all (a CUDA header that any of them opens is
# opened there too, and -H's include tree says through which); an implementation
# header, which must come first in its file, gets a unit of its own.
cmake_minimum_required(VERSION 3.21)
string(REPLACE "," ";" HEADERS "${HEADERS}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(failures "")
set(units "all")
set(unit_all "")
foreach(header IN LISTS HEADERS)
  if(NOT EXISTS "${INCLUDE_DIR}/${header}")
    list(APPEND failures "${header}: listed as CUDA-free but does not exist (remove it from the list?)")
  elseif(header MATCHES "implementation\\.hpp$")
    string(MAKE_C_IDENTIFIER "${header}" name)
    list(APPEND units ${name})
    set(unit_${name} "#include \"${header}\"\n")
  else()
    string(APPEND unit_all "#include \"${header}\"\n")
  endif()
endforeach()
foreach(name IN LISTS units)
  set(unit "${WORK_DIR}/${name}.cpp")
  file(WRITE "${unit}" "${unit_${name}}")
  # -H lists every header opened, one per line on stderr, behind one dot per level of inclusion.
  execute_process(COMMAND "${CXX}" -std=c++17 -fsyntax-only -H "-I${INCLUDE_DIR}" "${unit}"
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  string(REPLACE ";" "\\;" output "${output}")
  string(REPLACE "\n" ";" lines "${output}")
  set(messages "")
  set(chain "")  # the headers open at each level, down to the current one
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^(\\.+) (.*)$")
      string(APPEND messages "${line}\n")  # the compiler's own words
      continue()
    endif()
    string(LENGTH "${CMAKE_MATCH_1}" depth)
    set(path "${CMAKE_MATCH_2}")
    list(LENGTH chain open)
    while(open GREATER_EQUAL depth)
      list(REMOVE_AT chain -1)
      math(EXPR open "${open} - 1")
    endwhile()
    list(APPEND chain "${path}")
    if(path MATCHES "/(cuda[A-Za-z0-9_]*|driver_types|vector_types|nvml)\\.h$")
      list(JOIN chain " -> " through)
      list(APPEND failures "opens a CUDA header: ${through}")
    endif()
  endforeach()
  if(NOT result EQUAL 0)
    list(APPEND failures "${name}.cpp does not compile without a CUDA include path:\n${messages}")
  endif()
endforeach()
if(failures)
  string(REPLACE ";" "\n" failures "${failures}")
  message(FATAL_ERROR "headers that must need no CUDA:\n${failures}")
endif()
list(LENGTH HEADERS count)
message(STATUS "${count} headers compile with no CUDA include path and open no CUDA header")

# Checks of linked binaries, read with readelf -d:
#   - NO_CUDA_RUNTIME: these binaries record no libcudart.so (the gpusel command
#     must start on a node that has only the driver);
#   - SEARCH_PATHS: these binaries have no empty or relative RPATH/RUNPATH entry.
#     glibc reads an empty entry (CMake's build-RPATH padding leaves one, a
#     trailing ':') as the current directory, so a binary run from a directory
#     holding a libnvidia-ml.so.1 would load that file.
#
#   cmake -DREADELF=... -DNO_CUDA_RUNTIME=a,b -DSEARCH_PATHS=a,b,c -P check_binaries.cmake
set(failures "")
string(REPLACE "," ";" NO_CUDA_RUNTIME "${NO_CUDA_RUNTIME}")
string(REPLACE "," ";" SEARCH_PATHS "${SEARCH_PATHS}")
function(dynamic_section binary result)
  execute_process(COMMAND ${READELF} -d ${binary} OUTPUT_VARIABLE dynamic RESULT_VARIABLE failed)
  if(failed)
    message(FATAL_ERROR "readelf -d ${binary} failed")
  endif()
  set(${result} "${dynamic}" PARENT_SCOPE)
endfunction()

foreach(binary IN LISTS NO_CUDA_RUNTIME)
  dynamic_section(${binary} dynamic)
  if(dynamic MATCHES "NEEDED[^\n]*(libcudart[^]\n]*)")
    string(APPEND failures "${binary} records NEEDED ${CMAKE_MATCH_1}, a CUDA runtime it does not use\n")
  else()
    message(STATUS "${binary}: no CUDA runtime among its NEEDED libraries")
  endif()
endforeach()

foreach(binary IN LISTS SEARCH_PATHS)
  dynamic_section(${binary} dynamic)
  string(REGEX MATCHALL "Library r(un)?path: \\[[^\n]*" entries "${dynamic}")
  set(bad "")
  foreach(entry IN LISTS entries)
    string(REGEX REPLACE "^Library r(un)?path: \\[(.*)\\]$" "\\2" value "${entry}")
    # Split on ':' by hand: CMake lists drop empty elements, which are what we look for.
    string(REPLACE ":" ";:;" pieces "${value}")
    set(path "")
    set(paths "")
    foreach(piece IN LISTS pieces)
      if(piece STREQUAL ":")
        list(APPEND paths "<${path}>")
        set(path "")
      else()
        set(path "${piece}")
      endif()
    endforeach()
    list(APPEND paths "<${path}>")
    foreach(quoted IN LISTS paths)
      string(REGEX REPLACE "^<(.*)>$" "\\1" path "${quoted}")
      if(path STREQUAL "" OR NOT (path MATCHES "^/" OR path MATCHES "^\\$ORIGIN"))
        string(APPEND bad " \"${path}\" (in \"${value}\")")
      endif()
    endforeach()
  endforeach()
  if(bad)
    string(APPEND failures "${binary}: library search path entries that name the current directory:${bad}\n")
  else()
    message(STATUS "${binary}: every library search path is absolute or $ORIGIN")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "${failures}")
endif()

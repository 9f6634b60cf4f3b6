# ctest header_compile_once_abi_tag (see CMakeLists.txt here):
#   cmake -DNM=... -DPROGRAM=<compile_once_program> -DLIBRARY=<libgpusel.a> -P check_abi_tag.cmake
function(symbols file output_variable)
  execute_process(COMMAND ${NM} -C --defined-only ${file} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${NM} ${file} failed: ${err}")
  endif()
  set(${output_variable} "${out}" PARENT_SCOPE)
endfunction()

symbols(${LIBRARY} library)
symbols(${PROGRAM} program)
foreach(function query_inventory pick)
  # libgpusel.a defines it once, strong and tagged, and no untagged copy.
  if(NOT library MATCHES "\n[0-9a-f]+ T gpusel::${function}\\[abi:gpusel_compiled\\]\\(")
    message(FATAL_ERROR "libgpusel.a does not define gpusel::${function}[abi:gpusel_compiled]")
  endif()
  if(library MATCHES "\n[0-9a-f]+ [TW] gpusel::${function}\\(")
    message(FATAL_ERROR "libgpusel.a defines gpusel::${function} without the ABI tag")
  endif()
  # The program has both: the compiled one, and header_only.cpp's inline copy, weak, another symbol.
  if(NOT program MATCHES "\n[0-9a-f]+ T gpusel::${function}\\[abi:gpusel_compiled\\]\\(")
    message(FATAL_ERROR "the program lacks the compiled gpusel::${function}[abi:gpusel_compiled]")
  endif()
  if(NOT program MATCHES "\n[0-9a-f]+ W gpusel::${function}\\(")
    message(FATAL_ERROR "the program lacks header_only.cpp's inline gpusel::${function}")
  endif()
endforeach()
message(STATUS "compiled and header-only definitions are distinct symbols")

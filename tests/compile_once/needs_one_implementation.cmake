# ctest header_compile_once_needs_one_implementation (see CMakeLists.txt here):
#   cmake -DCXX=... -DINCLUDE_DIR=... -DWORK_DIR=... -P needs_one_implementation.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
# The machine layer alone, as a program without the CUDA runtime uses it (the gpusel command).
file(WRITE ${WORK_DIR}/main.cpp
  "#include <gpusel/machine/inventory.hpp>\nint main() { return gpusel::query_inventory().ok() ? 0 : 1; }\n")
file(WRITE ${WORK_DIR}/implementation.cpp "#include <gpusel/machine/implementation.hpp>\n")
set(flags -std=c++17 -DGPUSEL_COMPILE_ONCE -I${INCLUDE_DIR})

function(build what expect_success output_variable)
  execute_process(COMMAND ${CXX} ${flags} ${ARGN} -o ${WORK_DIR}/program -ldl -pthread
    WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(expect_success AND NOT status EQUAL 0)
    message(FATAL_ERROR "${what}: expected to link, but failed (${status}):\n${out}")
  elseif(NOT expect_success AND status EQUAL 0)
    message(FATAL_ERROR "${what}: expected to fail at link time, but it linked")
  endif()
  message(STATUS "${what}: as expected (status ${status})")
  set(${output_variable} "${out}" PARENT_SCOPE)
endfunction()

execute_process(COMMAND ${CXX} ${flags} -c ${WORK_DIR}/implementation.cpp -o ${WORK_DIR}/implementation.o
  RESULT_VARIABLE status ERROR_VARIABLE out)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "implementation.cpp does not compile:\n${out}")
endif()

build("without the implementation file" FALSE out ${WORK_DIR}/main.cpp)
if(NOT out MATCHES "undefined reference to [`']gpusel::query_inventory|gpusel::query_inventory.*referenced from|undefined symbol: gpusel::query_inventory")
  message(FATAL_ERROR "the link failed, but not for want of gpusel::query_inventory:\n${out}")
endif()
build("with the implementation file" TRUE out ${WORK_DIR}/main.cpp ${WORK_DIR}/implementation.o)
build("with the implementation file twice" FALSE out ${WORK_DIR}/main.cpp ${WORK_DIR}/implementation.o
      ${WORK_DIR}/implementation.o)
if(NOT out MATCHES "multiple definition of [`']gpusel::|duplicate symbol: gpusel::")
  message(FATAL_ERROR "the link failed, but not for a second definition:\n${out}")
endif()

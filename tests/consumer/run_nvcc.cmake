# Builds tests/consumer/nvcc (CUDA and C++ consumers of every gpusel target) in
# WORK_DIR from scratch, checks from each linked binary that it carries exactly
# the CUDA runtime expected, and runs each one (the CPU fallback without a GPU).
#
#   cmake -DGPUSEL_SOURCE_DIR=... -DWORK_DIR=... -DCMAKE_CXX_COMPILER=... -DCMAKE_CUDA_COMPILER=...
#         -DCMAKE_GENERATOR=... -DREADELF=... -DNM=... -P run_nvcc.cmake
file(REMOVE_RECURSE ${WORK_DIR})

include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)

# One architecture keeps nvcc's device passes short; the binaries run no kernel without a GPU.
run(${CMAKE_COMMAND} -S ${GPUSEL_SOURCE_DIR}/tests/consumer/nvcc -B ${WORK_DIR} -G ${CMAKE_GENERATOR}
    -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER} -DCMAKE_CUDA_COMPILER=${CMAKE_CUDA_COMPILER}
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGPUSEL_SOURCE_DIR=${GPUSEL_SOURCE_DIR} -DGPUSEL_BUILD_TOOLS=OFF)
run(${CMAKE_COMMAND} --build ${WORK_DIR})
run(${CMAKE_COMMAND} -DREADELF=${READELF} -DNM=${NM} -DLIST=${WORK_DIR}/expected_runtimes.txt -DDIR=${WORK_DIR}
    -P ${GPUSEL_SOURCE_DIR}/tests/consumer/nvcc/check_runtimes.cmake)
file(STRINGS ${WORK_DIR}/expected_runtimes.txt lines)
foreach(line IN LISTS lines)
  string(REGEX REPLACE " .*" "" name "${line}")
  run(${WORK_DIR}/${name})
endforeach()

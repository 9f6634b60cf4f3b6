# Builds and runs tests/consumer/project one way (MODE), in WORK_DIR, from scratch.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)

set(extra)
if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} -S ${GPUSEL_SOURCE_DIR} -B ${WORK_DIR}/gpusel-build -G ${CMAKE_GENERATOR}
      -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER} -DGPUSEL_BUILD_TESTS=OFF -DGPUSEL_BUILD_EXAMPLES=OFF
      -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/gpusel-build)  # the gpusel command, installed into bin/
  run(${CMAKE_COMMAND} --install ${WORK_DIR}/gpusel-build)
  if(NOT EXISTS ${WORK_DIR}/prefix/bin/gpusel)
    message(FATAL_ERROR "the gpusel command is not installed into bin/")
  endif()
  if(NOT EXISTS ${WORK_DIR}/prefix/share/gpusel/gpuselConfig.cmake)
    message(FATAL_ERROR "the package config is not under share/gpusel")
  endif()
  list(APPEND extra -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
endif()

run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/consumer-build -G ${CMAKE_GENERATOR}
    -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER} -DGPUSEL_CONSUMER_MODE=${MODE} -DGPUSEL_SOURCE_DIR=${GPUSEL_SOURCE_DIR}
    -DFETCHCONTENT_FULLY_DISCONNECTED=OFF ${extra})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-build)
run(${WORK_DIR}/consumer-build/consumer)
run(${WORK_DIR}/consumer-build/consumer_compiled)
run(${WORK_DIR}/consumer-build/consumer_mixed)

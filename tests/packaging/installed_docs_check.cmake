# Installs gpusel into a temporary prefix and checks that the installed docs
# read as they do in the source tree: every relative link of every installed
# Markdown file names a file that was installed with it.
#
#   cmake -DGPUSEL_SOURCE_DIR=... -DWORK_DIR=... -DCMAKE_CXX_COMPILER=... -DCMAKE_GENERATOR=...
#         -P installed_docs_check.cmake
cmake_minimum_required(VERSION 3.21)
file(REMOVE_RECURSE "${WORK_DIR}")

execute_process(COMMAND ${CMAKE_COMMAND} -S "${GPUSEL_SOURCE_DIR}" -B "${WORK_DIR}/build" -G "${CMAKE_GENERATOR}"
                  "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}" -DGPUSEL_BUILD_TESTS=OFF -DGPUSEL_BUILD_EXAMPLES=OFF
                  -DGPUSEL_BUILD_BENCHMARKS=OFF -DGPUSEL_BUILD_TOOLS=OFF -DGPUSEL_INSTALL_COMPILED=OFF
                  "-DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix"
                COMMAND_ERROR_IS_FATAL ANY OUTPUT_QUIET)
execute_process(COMMAND ${CMAKE_COMMAND} --install "${WORK_DIR}/build" COMMAND_ERROR_IS_FATAL ANY OUTPUT_QUIET)

file(GLOB_RECURSE documents "${WORK_DIR}/prefix/*.md")
if(NOT documents)
  message(FATAL_ERROR "no Markdown file was installed under ${WORK_DIR}/prefix")
endif()
set(broken "")
foreach(document IN LISTS documents)
  file(READ "${document}" text)
  get_filename_component(directory "${document}" DIRECTORY)
  # [text](target) and [text](target#anchor), skipping URLs and in-page anchors.
  # (Brackets would stop CMake splitting the list: the "](" is renamed first.)
  string(REPLACE "](" "<link>(" text "${text}")
  string(REGEX MATCHALL "<link>\\([^)#: ]+[)#]" links "${text}")
  foreach(link IN LISTS links)
    string(REGEX REPLACE "^<link>\\(([^)#]+)[)#]$" "\\1" target "${link}")
    if(NOT EXISTS "${directory}/${target}")
      file(RELATIVE_PATH shown "${WORK_DIR}/prefix" "${document}")
      string(APPEND broken "  ${shown} links ${target}, which was not installed beside it\n")
    endif()
  endforeach()
endforeach()
if(broken)
  message(FATAL_ERROR "installed docs with broken links:\n${broken}")
endif()
list(LENGTH documents count)
message(STATUS "${count} installed documents, every relative link resolves")

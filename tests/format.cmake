# clang_format (label cpu): every tracked *.h *.cc *.cu *.cuh under include/ src/ tools/ tests/ python/
# examples/ bench/ must be formatted as .clang-format says (`clang-format --dry-run -Werror`).
# The test fails listing the offending files; scripts/format fixes them.
#
# This file has two roles. Included from tests/CMakeLists.txt it registers the test; the test
# then runs this same file in script mode (cmake -P), which does the check. Outside a git checkout
# (a source tarball) the files are found with a glob instead of `git ls-files`.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  # clang-format 14 is the version the style was written for (Debian 12, CI); others may
  # disagree on details, so prefer it by name.
  find_program(MOE_EP_CLANG_FORMAT NAMES clang-format-14 clang-format)
  find_package(Git QUIET)
  if(MOE_EP_CLANG_FORMAT)
    add_test(NAME clang_format
             COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
                     -DCLANG_FORMAT=${MOE_EP_CLANG_FORMAT} -DGIT=${GIT_EXECUTABLE}
                     -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(clang_format PROPERTIES LABELS cpu TIMEOUT 300)
  else()
    message(STATUS "moe-ep: clang-format not found, test clang_format not added")
  endif()
  return()
endif()

# Script mode: SOURCE_DIR, CLANG_FORMAT and (optional) GIT are given with -D.
set(dirs include src tools tests examples bench python)
set(files "")
if(GIT)
  execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} ls-files -- ${dirs}
                  RESULT_VARIABLE git_rc OUTPUT_VARIABLE git_out ERROR_QUIET)
  if(git_rc EQUAL 0)
    string(REPLACE "\n" ";" tracked "${git_out}")
    foreach(file IN LISTS tracked)
      # Tracked but deleted in the working tree: nothing to check.
      if(file MATCHES "\\.(h|cc|cu|cuh)$" AND EXISTS ${SOURCE_DIR}/${file})
        list(APPEND files ${file})
      endif()
    endforeach()
  endif()
endif()
if(NOT files)
  set(globs "")
  foreach(dir IN LISTS dirs)
    list(APPEND globs ${SOURCE_DIR}/${dir}/*.h ${SOURCE_DIR}/${dir}/*.cc ${SOURCE_DIR}/${dir}/*.cu
         ${SOURCE_DIR}/${dir}/*.cuh)
  endforeach()
  file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR} ${globs})
  list(SORT files)
endif()
if(NOT files)
  message(FATAL_ERROR "clang_format: no source files found under ${SOURCE_DIR}")
endif()

set(bad "")
foreach(file IN LISTS files)
  execute_process(COMMAND ${CLANG_FORMAT} --dry-run -Werror ${file}
                  WORKING_DIRECTORY ${SOURCE_DIR}
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    list(APPEND bad ${file})
  endif()
endforeach()

list(LENGTH files num_files)
if(bad)
  list(LENGTH bad num_bad)
  list(JOIN bad "\n  " bad_lines)
  message(FATAL_ERROR "clang_format: ${num_bad} of ${num_files} files are not formatted as "
                      ".clang-format says:\n  ${bad_lines}\n"
                      "Run scripts/format (or: ${CLANG_FORMAT} -i <file>) and commit the result.")
endif()
message(STATUS "clang_format: ${num_files} files formatted")

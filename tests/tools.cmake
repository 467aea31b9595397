# Tests of the Python tools under tools/ that need nothing but the standard library (label cpu):
#   cost_model  tests/tools/test_cost_model.py: tools/cost_model.py (docs/multi-node.md) against a
#               brute-force enumeration of small routings, its byte accounting and hand-worked
#               EP16 figures
#   bench_compare  tests/tools/test_bench_compare.py: tools/bench_compare.py (docs/perf-notes.md, how
#               we measure) on bench logs built in the test, ranges, means and differences by hand
# They run with the interpreter of -DPython3_EXECUTABLE when given (scripts/test passes Debian's
# /usr/bin/python3), else /usr/bin/python3, else the first python3 on PATH; they do not need the
# Python package to be built.
if(Python3_EXECUTABLE)
  set(MOE_EP_TOOLS_PYTHON ${Python3_EXECUTABLE})
elseif(EXISTS /usr/bin/python3)
  set(MOE_EP_TOOLS_PYTHON /usr/bin/python3)
else()
  find_program(MOE_EP_TOOLS_PYTHON NAMES python3)
endif()
if(NOT MOE_EP_TOOLS_PYTHON)
  message(STATUS "moe-ep: no python3 found, tests cost_model and bench_compare not added")
  return()
endif()

add_test(NAME cost_model
         COMMAND ${MOE_EP_TOOLS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/tools/test_cost_model.py
                 ${PROJECT_SOURCE_DIR}/tools/cost_model.py)
set_tests_properties(cost_model PROPERTIES LABELS cpu TIMEOUT 120
                     ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")

add_test(NAME bench_compare
         COMMAND ${MOE_EP_TOOLS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/tools/test_bench_compare.py
                 ${PROJECT_SOURCE_DIR}/tools/bench_compare.py)
set_tests_properties(bench_compare PROPERTIES LABELS cpu TIMEOUT 60
                     ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")

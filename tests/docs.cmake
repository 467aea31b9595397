# docs_links: every relative link and #anchor of README.md and docs/*.md resolves
# (tests/docs_links.py; label cpu).
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME docs_links COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/docs_links.py
                                   ${CMAKE_SOURCE_DIR})
  set_tests_properties(docs_links PROPERTIES LABELS cpu TIMEOUT 60)
endif()
